"""``MemoryRuns``: the runs, metrics and model versions of a ``MemoryStore``.

Plain dictionaries behind the memory store's lock (the store calls these methods with it
held); the decisions come from ``fulmen.store.runs``, which the SQL backends share.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from fulmen.store.runs import (
    conflicting_metrics,
    conflicting_version,
    missing_run,
    page_run_metrics,
    resumed_run,
    started_run,
    store_time,
    updated_run,
)
from fulmen.types import ModelVersion, Page, Run, RunMetrics, RunStatus, Unset

__all__ = ["MemoryRuns"]


class MemoryRuns:
    """Runs with their metrics (sorted by step, then time) and model versions."""

    def __init__(self) -> None:
        self._runs: dict[str, Run] = {}
        self._metrics: dict[str, list[RunMetrics]] = {}
        self._metric_keys: dict[tuple[str, int, float], RunMetrics] = {}
        self._versions: dict[tuple[str, int], ModelVersion] = {}

    def start(self, run: Run) -> Run:
        """See ``Store.start_run``."""
        stored = self._runs.get(run.run_id)
        now = store_time()
        started = started_run(run, now) if stored is None else resumed_run(stored, run, now)
        self._runs[run.run_id] = started
        self._metrics.setdefault(run.run_id, [])
        return started

    def update(self, run_id: str, status: RunStatus | Unset, ended_at: float | Unset | None) -> Run:
        """See ``Store.update_run`` (arguments already checked)."""
        run = self.get(run_id)
        self._runs[run_id] = updated = updated_run(run, status, ended_at, store_time())
        return updated

    def add_metrics(self, metrics: Sequence[RunMetrics]) -> None:
        """See ``Store.add_run_metrics``: checks the whole batch before storing any of it."""
        fresh: dict[tuple[str, int, float], RunMetrics] = {}
        for record in metrics:
            self.get(record.run_id)
            key = (record.run_id, record.step, record.time)
            known = self._metric_keys.get(key) or fresh.get(key)
            if known is not None:
                if known != record:
                    raise conflicting_metrics(known)
                continue
            fresh[key] = record
        for key, record in fresh.items():
            self._metric_keys[key] = record
            rows = self._metrics[record.run_id]
            bisect.insort(rows, record, key=lambda r: (r.step, r.time))

    def list(self, limit: int, offset: int) -> Page[Run]:
        """See ``Store.list_runs``."""
        ordered = sorted(self._runs.values(), key=lambda r: (-r.started_at, r.run_id))
        items = ordered[offset : offset + limit]
        more = offset + limit < len(ordered)
        return Page(items=items, next_cursor=offset + limit if more else None)

    def get(self, run_id: str) -> Run:
        """See ``Store.get_run``."""
        try:
            return self._runs[run_id]
        except KeyError:
            raise missing_run(run_id) from None

    def query_metrics(self, run_id: str, after_step: int | None, limit: int) -> Page[RunMetrics]:
        """See ``Store.query_run_metrics``."""
        rows = self._metrics[self.get(run_id).run_id]
        start = 0 if after_step is None else bisect.bisect_right(rows, after_step, key=_step)
        return page_run_metrics(rows[start:], limit)

    def add_version(self, version: ModelVersion) -> ModelVersion:
        """See ``Store.add_model_version``."""
        self.get(version.run_id)
        key = (version.run_id, version.version)
        stored = self._versions.get(key)
        if stored is not None:
            if not stored.same_content(version):
                raise conflicting_version(stored)
            return stored
        self._versions[key] = stored = version.model_copy(update={"created_at": store_time()})
        return stored

    def list_versions(self, run_id: str | None) -> list[ModelVersion]:
        """See ``Store.list_model_versions``."""
        return [v for _, v in sorted(self._versions.items()) if run_id in (None, v.run_id)]


def _step(record: RunMetrics) -> int:
    return record.step
