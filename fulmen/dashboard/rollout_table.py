"""The rollouts table: newest first, filtered partly by the store and partly here.

The store's query API filters by status, mode, task id and resources version and pages in
enqueue order, oldest first. A console wants the newest first, and filters the store cannot
apply (reward range, agent, run, task text), so this module:

- finds the highest enqueue position with a few one-row queries (remembered between calls),
- reads windows of positions backwards, ``cursor = hi - window``, letting the store apply its
  filters, and applies the rest here;
- stops after ``limit`` matches or after examining ``budget`` rollouts, and returns a cursor
  (``before``) to continue from; ``exhausted`` says the scan reached the oldest rollout.

Cost of what the store cannot filter, per rollout examined: task text and run are free (the
rollout row is already read); a reward range reads the reward (two or three queries, kept for final
rollouts, see ``fulmen.dashboard.rewards``); an agent reads the rollout's LLM calls (one query
per 1,000 calls, token ids included). Those filters get a smaller ``budget`` per request.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from fulmen.dashboard.rewards import RewardReader
from fulmen.store.reading import read_llm_calls
from fulmen.types import Mode, RolloutQuery, RolloutStatus

if TYPE_CHECKING:
    from fulmen.store.base import Store
    from fulmen.types import Rollout

__all__ = ["TIME_BUDGET_S", "RolloutFilter", "RolloutTable", "TablePage"]

_FIRST_WINDOW = 64
_MAX_WINDOW = 5000  # positions per store query (RolloutQuery allows 10,000 rows)
_TASK_PREVIEW = 160
TIME_BUDGET_S = 0.15
"""How long one table request scans before it answers with what it found (seconds)."""


@dataclass(frozen=True)
class RolloutFilter:
    """What the table shows; every filter that is set must match.

    Attributes:
        statuses / mode / task_id / resources_version: applied by the store.
        run_id / resources_versions: the ``run`` filter, applied here: a rollout is a run's
            when its id starts with ``RUN_ID-`` (how ``fulmen train`` names its rollouts) or
            it used a resources version the run published.
        min_reward / max_reward: an inclusive reward range, applied here (rollouts without a
            reward never match a range).
        agent: an agent name that made at least one of the rollout's LLM calls, applied here.
        text: a case-insensitive substring of the task (its input as JSON, or its task id).
    """

    statuses: tuple[RolloutStatus, ...] = ()
    mode: Mode | None = None
    task_id: str | None = None
    resources_version: int | None = None
    run_id: str | None = None
    resources_versions: frozenset[int] = frozenset()
    min_reward: float | None = None
    max_reward: float | None = None
    agent: str | None = None
    text: str | None = None

    @property
    def needs_reward(self) -> bool:
        """Whether a reward must be read for every rollout examined."""
        return self.min_reward is not None or self.max_reward is not None

    @property
    def is_costly(self) -> bool:
        """Whether examining a rollout costs store queries (reward range, agent)."""
        return self.needs_reward or self.agent is not None

    def store_query(self, cursor: int, limit: int) -> RolloutQuery:
        """Return the part of this filter the store applies, for one window of positions."""
        return RolloutQuery(
            statuses=list(self.statuses) or None,
            mode=self.mode,
            task_id=self.task_id,
            resources_version=self.resources_version,
            cursor=cursor,
            limit=limit,
        )

    def matches_row(self, rollout: Rollout) -> bool:
        """Apply the free filters (run, task text) to a rollout already read."""
        if self.run_id is not None and not (
            rollout.rollout_id.startswith(f"{self.run_id}-")
            or rollout.resources_version in self.resources_versions
        ):
            return False
        if self.text:
            needle = self.text.casefold()
            haystack = task_text(rollout.input) + " " + (rollout.task_id or "")
            if needle not in haystack.casefold():
                return False
        return True

    def matches_reward(self, reward: float | None) -> bool:
        """Apply the reward range."""
        if not self.needs_reward:
            return True
        if reward is None:
            return False
        too_low = self.min_reward is not None and reward < self.min_reward
        too_high = self.max_reward is not None and reward > self.max_reward
        return not (too_low or too_high)


def task_text(value: Any) -> str:
    """Return a task input as text: a string as is, anything else as compact JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


@dataclass(frozen=True)
class TablePage:
    """One page of the table, newest first.

    Attributes:
        items: the rows (JSON-ready dicts).
        before: pass as ``before`` to get the next (older) page; ``None`` when none.
        examined: rollouts this request examined.
        exhausted: the scan reached the oldest rollout, so ``items`` are all the matches
            older than the starting point.
        newest: the highest enqueue position in the store when the page was read.
    """

    items: list[dict[str, Any]]
    before: int | None
    examined: int
    exhausted: bool
    newest: int


class RolloutTable:
    """Pages of rollouts for the dashboard, read through any ``Store``.

    Args:
        store: where rollouts are read.
        rewards: the reward reader (shared with other views so its cache is shared too).
    """

    def __init__(self, store: Store, rewards: RewardReader) -> None:
        self._store = store
        self._rewards = rewards
        self._newest = 0  # highest enqueue position seen so far

    async def newest_position(self) -> int:
        """Return the highest enqueue position, probing up from the one seen last time.

        Each probe is a one-row query (``cursor=c, limit=1`` returns the next rollout after
        ``c``): the position doubles its step until nothing follows, then bisects.
        """
        known = self._newest
        step = 1
        probe = await self._next_after(known)
        while probe is not None:
            known = probe
            probe = await self._next_after(known + step)
            if probe is not None:
                step *= 2
        # no rollout after ``known + step``; the highest lies in [known, known + step]
        lo, hi = known, known + step
        while hi - lo > 1:
            mid = (lo + hi) // 2
            found = await self._next_after(mid)
            if found is None:
                hi = mid
            else:
                lo = found
        # the highest is ``lo`` or, when it exists, ``hi``
        found = await self._next_after(lo)
        self._newest = found if found is not None else lo
        return lo

    async def _next_after(self, position: int) -> int | None:
        page = await self._store.query_rollouts(RolloutQuery(cursor=position, limit=1))
        return page.items[0].position if page.items else None

    async def page(
        self,
        where: RolloutFilter,
        *,
        before: int | None = None,
        limit: int = 25,
        budget: int | None = None,
        time_budget_s: float | None = TIME_BUDGET_S,
    ) -> TablePage:
        """Return up to ``limit`` matching rollouts older than ``before`` (``None``: newest).

        ``budget`` caps the rollouts examined: by default 64 with a reward range or an agent
        filter, 2,000 with a task text or run filter, else 50,000 positions (the store filters
        those, so only matches are read). ``time_budget_s`` stops the scan between two store
        reads once that much time went by (after at least one read; ``None``: no limit), so a
        slow backend answers on time with fewer rows. The page may then hold fewer than
        ``limit`` rows and ``before`` says where to go on.
        """
        clock = asyncio.get_running_loop().time
        deadline = None if time_budget_s is None else clock() + time_budget_s
        newest = await self.newest_position()
        if budget is None:
            budget = _budget(where)
        hi = newest if before is None else min(before - 1, newest)
        window = max(_FIRST_WINDOW, 2 * limit)
        found: list[tuple[Rollout, float | None]] = []
        examined = 0
        while hi > 0 and len(found) < limit and examined < budget:
            if examined and deadline is not None and clock() >= deadline:
                break
            size = min(window, hi, _MAX_WINDOW, budget - examined)
            lo = hi - size
            page = await self._store.query_rollouts(where.store_query(lo, size))
            rows = [r for r in page.items if r.position <= hi and where.matches_row(r)]
            rows.reverse()  # newest first
            kept, seen = await self._filter_costly(where, rows, limit - len(found), deadline)
            found += kept
            examined += seen if where.is_costly else size
            # resume below the last row looked at, or below the window when all were seen
            hi = rows[seen - 1].position - 1 if seen < len(rows) else lo
            window = min(window * 2, _MAX_WINDOW)
        rewards = await self._rewards.rewards([r for r, reward in found if reward is None])
        read = iter(rewards)
        items = [
            _row(rollout, reward if reward is not None else next(read)) for rollout, reward in found
        ]
        exhausted = hi <= 0
        return TablePage(
            items=items,
            before=None if exhausted else hi + 1,
            examined=examined,
            exhausted=exhausted,
            newest=newest,
        )

    async def _filter_costly(
        self, where: RolloutFilter, rows: list[Rollout], wanted: int, deadline: float | None
    ) -> tuple[list[tuple[Rollout, float | None]], int]:
        """Apply the reward and agent filters in chunks; return matches and rows examined.

        Stops as soon as ``wanted`` matches are found, so a page reads no more rewards than
        it needs, or between chunks past ``deadline`` (loop time). A reward read here is
        returned with its row (``None`` when not read).
        """
        clock = asyncio.get_running_loop().time
        if not where.is_costly:
            picked = rows[:wanted]
            return [(r, None) for r in picked], len(picked)
        kept: list[tuple[Rollout, float | None]] = []
        seen = 0
        chunk = 16
        while seen < len(rows) and len(kept) < wanted:
            if seen and deadline is not None and clock() >= deadline:
                break
            batch = rows[seen : seen + chunk]
            rewards = await self._rewards.rewards(batch) if where.needs_reward else None
            agents = await _agents_of(self._store, batch) if where.agent is not None else None
            for i, rollout in enumerate(batch):
                seen += 1
                reward = rewards[i] if rewards is not None else None
                if not where.matches_reward(reward):
                    continue
                if agents is not None and where.agent not in agents[i]:
                    continue
                kept.append((rollout, reward))
                if len(kept) == wanted:
                    return kept, seen
        return kept, seen


def _budget(where: RolloutFilter) -> int:
    """Return how many rollouts one request may examine for ``where`` (~250 ms of work here)."""
    if where.is_costly:
        return 64
    if where.text or where.run_id is not None:
        return 2_000
    return 50_000


async def _agents_of(store: Store, rollouts: list[Rollout]) -> list[set[str]]:
    """Return the agent names of each rollout's LLM calls (every attempt)."""
    calls = await asyncio.gather(*(read_llm_calls(store, r.rollout_id) for r in rollouts))
    return [{c.agent_name for c in cs if c.agent_name} for cs in calls]


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _row(rollout: Rollout, reward: float | None) -> dict[str, Any]:
    """One table row: what the page shows of a rollout, with its reward."""
    took = None
    if rollout.started_at is not None and rollout.ended_at is not None:
        took = (rollout.ended_at - rollout.started_at).total_seconds()
    return {
        "rollout_id": rollout.rollout_id,
        "position": rollout.position,
        "status": rollout.status.value,
        "mode": rollout.mode.value,
        "task_id": rollout.task_id,
        "task": task_text(rollout.input)[:_TASK_PREVIEW],
        "resources_version": rollout.resources_version,
        "attempt_count": rollout.attempt_count,
        "enqueued_at": _iso(rollout.enqueued_at),
        "duration_s": took,
        "reward": reward,
        "error": rollout.error,
    }
