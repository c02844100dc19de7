"""Query filters, pages and statistics returned by the store."""

from __future__ import annotations

from typing import Generic, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from fulmen.types.limits import Int32, Int64, TaskId, Text
from fulmen.types.rollout import AttemptStatus, Mode, Rollout, RolloutStatus

__all__ = ["Page", "RolloutQuery", "StoreStats", "page_after_sequence"]

T = TypeVar("T")
R = TypeVar("R", bound="_Sequenced")


class RolloutQuery(BaseModel):
    """Filters for listing rollouts; every filter that is set must match.

    Results come in enqueue order; pass the previous page's ``next_cursor`` as ``cursor`` to
    continue.
    """

    model_config = ConfigDict(extra="forbid")

    statuses: list[RolloutStatus] | None = None
    mode: Mode | None = None
    rollout_ids: list[Text] | None = None
    task_id: TaskId | None = None
    resources_version: Int32 | None = None
    cursor: Int64 | None = Field(default=None, ge=0)
    limit: int = Field(default=100, ge=1, le=10_000)

    def matches(self, rollout: Rollout) -> bool:
        """Tell whether ``rollout`` passes every filter and lies after the cursor."""
        return (
            (self.cursor is None or rollout.position > self.cursor)
            and (self.rollout_ids is None or rollout.rollout_id in self.rollout_ids)
            and (self.statuses is None or rollout.status in self.statuses)
            and (self.mode is None or rollout.mode == self.mode)
            and (self.task_id is None or rollout.task_id == self.task_id)
            and (
                self.resources_version is None
                or rollout.resources_version == self.resources_version
            )
        )


class Page(BaseModel, Generic[T]):
    """One page of results; ``next_cursor`` is ``None`` on the last page."""

    model_config = ConfigDict(extra="forbid")

    items: list[T]
    next_cursor: int | None = None


class StoreStats(BaseModel):
    """Counts over the whole store."""

    model_config = ConfigDict(extra="forbid")

    rollouts: dict[RolloutStatus, int]
    attempts: dict[AttemptStatus, int]
    spans: int
    llm_calls: int
    resources_versions: int
    workers: int


class _Sequenced(Protocol):
    @property
    def sequence(self) -> int: ...
    @property
    def attempt_id(self) -> str | None: ...


def page_after_sequence(
    rows: list[R], attempt_id: str | None, after_sequence: int, limit: int
) -> Page[R]:
    """Page through records by store sequence number (the in-memory form of the SQL query).

    Keeps rows of ``attempt_id`` (all when ``None``) with ``sequence > after_sequence``, in
    sequence order; ``next_cursor`` is set only when more rows follow.
    """
    items = [
        r
        for r in rows
        if r.sequence > after_sequence and (attempt_id is None or r.attempt_id == attempt_id)
    ]
    items.sort(key=lambda r: r.sequence)
    if len(items) > limit:
        return Page(items=items[:limit], next_cursor=items[limit - 1].sequence)
    return Page(items=items, next_cursor=None)
