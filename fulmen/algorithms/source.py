"""Training data already in a store: which finished rollouts an offline algorithm reads.

``StoreSource`` names a store and a ``StoreFilter``; ``fulmen train`` builds one from
``data: {from_store: URL, filter: {...}}`` (or an algorithm's own ``source``). The filter's
fields that the store can answer (mode, task, resources version) go into its rollout query; the
rest (end time, agent, reward) are checked on each rollout read, by :func:`keeps`, before
``max_rollouts`` counts it. Kept traffic of a deployed agent (``mode: production`` sessions
with delayed rewards) and an earlier run's or a teacher's rollouts are read the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, model_validator

from fulmen.types import Mode, Rollout, RolloutQuery, RolloutStatus

__all__ = ["StoreFilter", "StoreSource", "keeps"]


class StoreFilter(BaseModel):
    """Which succeeded rollouts of a store are read (every filter that is set must match).

    Attributes:
        mode: only rollouts of this mode (``production`` for kept traffic, ``train``, ...).
        task_id: only rollouts of this task.
        resources_version: only rollouts run with this resources version (one teacher run).
        min_reward: only rollouts whose latest reward is at least this (rollouts without a
            reward never pass it).
        ended_after / ended_before: only rollouts that ended in ``[ended_after,
            ended_before)`` (aware datetimes, e.g. ``2026-11-22T00:00:00Z``).
        agent: only rollouts with at least one call by this agent (the ``x-fulmen-agent``
            name, or the one its spans give); which calls are trained is still
            ``transitions.agents``.
        max_rollouts: read at most this many matching rollouts, in enqueue order.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Mode | None = None
    task_id: str | None = Field(default=None, min_length=1)
    resources_version: int | None = Field(default=None, ge=1)
    min_reward: float | None = Field(default=None, allow_inf_nan=False)
    ended_after: AwareDatetime | None = None
    ended_before: AwareDatetime | None = None
    agent: str | None = Field(default=None, min_length=1)
    max_rollouts: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _ordered_range(self) -> StoreFilter:
        if (
            self.ended_after is not None
            and self.ended_before is not None
            and self.ended_after >= self.ended_before
        ):
            raise ValueError(
                f"filter.ended_after ({self.ended_after.isoformat()}) must be before "
                f"filter.ended_before ({self.ended_before.isoformat()})"
            )
        return self

    def query(self) -> RolloutQuery:
        """Build the store-side part: succeeded rollouts of the mode, task and version."""
        return RolloutQuery(
            statuses=[RolloutStatus.SUCCEEDED],
            mode=self.mode,
            task_id=self.task_id,
            resources_version=self.resources_version,
        )


class StoreSource(BaseModel):
    """Finished rollouts already in a store: kept production traffic, a teacher's runs.

    Attributes:
        store: the store's URL (``sqlite:///...``, ``postgresql://...``, or an ``http://...``
            store that needs no token); it is only read.
        filter: which succeeded rollouts to read.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    store: str = Field(min_length=1)
    filter: StoreFilter = Field(default_factory=StoreFilter)


def keeps(
    wanted: StoreFilter,
    rollout: Rollout,
    *,
    reward: float | None,
    agents: Sequence[str | None],
) -> bool:
    """Tell whether a rollout the store query returned passes the rest of ``wanted``.

    Args:
        wanted: the filter.
        rollout: the rollout (its ``ended_at`` is checked against the time range).
        reward: its latest reward (``None``: it has none).
        agents: the agent of each of its calls.
    """
    ended: datetime | None = rollout.ended_at
    if wanted.ended_after is not None and (ended is None or ended < wanted.ended_after):
        return False
    if wanted.ended_before is not None and (ended is None or ended >= wanted.ended_before):
        return False
    if wanted.min_reward is not None and (reward is None or reward < wanted.min_reward):
        return False
    return wanted.agent is None or wanted.agent in agents
