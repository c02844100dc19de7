"""Query filters, pages and statistics returned by the store."""

from __future__ import annotations

from typing import Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from fulmen.types.rollout import AttemptStatus, Mode, RolloutStatus

__all__ = ["Page", "RolloutQuery", "StoreStats"]

T = TypeVar("T")


class RolloutQuery(BaseModel):
    """Filters for listing rollouts; every filter that is set must match.

    Results come in enqueue order; pass the previous page's ``next_cursor`` as ``cursor`` to
    continue.
    """

    model_config = ConfigDict(extra="forbid")

    statuses: list[RolloutStatus] | None = None
    mode: Mode | None = None
    rollout_ids: list[str] | None = None
    task_id: str | None = None
    resources_version: int | None = None
    cursor: int | None = Field(default=None, ge=0)
    limit: int = Field(default=100, ge=1, le=10_000)


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
