"""Re-scoring stored rollouts with a new reward function, without running the agent.

``rescore`` reads the finished rollouts a ``RescoreFilter`` selects, gives each one to the
reward function as a ``RecordedRollout`` (task, recorded calls, final text) and returns old
and new rewards side by side. ``write_rewards`` stores the new values as a named reward
through the store's reward API (``Store.add_reward``): by default next to the rollout's current
reward, which stays the reward (the post repeats the current primary value under its name);
with ``primary=True`` the new value becomes the rollout's reward. Posts are idempotent: the
same name and value for a rollout is stored once. Re-scoring with a judge and rubric instead of
a function is ``fulmen.debugging.rescore_judge``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeAlias, cast

from fulmen.debugging.recorded import RecordedRollout, recorded_rollout
from fulmen.errors import ConfigError
from fulmen.importing import import_object, put_first_on_sys_path

if TYPE_CHECKING:
    from pathlib import Path

    from fulmen.store.base import Store
    from fulmen.transitions.trajectory import AttemptRecords
    from fulmen.types import Mode, Rollout

__all__ = [
    "JudgeTally",
    "RescoreFilter",
    "RescoreResult",
    "RescoredRollout",
    "RewardFunction",
    "load_reward_function",
    "rescore",
    "selected_rollouts",
    "signal_counts",
    "write_rewards",
]

RewardFunction: TypeAlias = Callable[[RecordedRollout], "float | Awaitable[float]"]
_PAGE = 500
_CHANGED = 1e-9


@dataclass(frozen=True)
class RescoreFilter:
    """Which stored rollouts to re-score: succeeded ones matching every filter that is set.

    Attributes:
        mode: only this mode (``train``, ``val``, ...).
        task_id: only rollouts of this task.
        resources_version: only rollouts that ran on this resources version.
        since: only rollouts that ended at or after this time (time zone aware).
        limit: at most this many rollouts, oldest first.
    """

    mode: Mode | None = None
    task_id: str | None = None
    resources_version: int | None = None
    since: datetime | None = None
    limit: int = 1000


@dataclass(frozen=True)
class RescoredRollout:
    """One rollout's old and new reward (``new`` is ``None`` when the function raised).

    ``air`` counts the calls on which each automatic intermediate reward fired
    (``fulmen.transitions.air``), shown beside the rewards. ``scores`` holds each criterion's
    score when a judge re-scored it (``new`` is their weighted mean).
    """

    rollout: RecordedRollout
    old: float | None
    new: float | None
    error: str | None = None
    air: dict[str, int] = dataclasses.field(default_factory=dict)
    scores: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def change(self) -> float:
        """Return ``new - old`` (0 when either is missing)."""
        if self.old is None or self.new is None:
            return 0.0
        return self.new - self.old


@dataclass(frozen=True)
class JudgeTally:
    """What the judge did in a re-scoring with a rubric (``fulmen rescore --judge``).

    Attributes:
        requests: questions sent to the judge; cache_hits: answers reused instead.
        retries: questions asked again after an answer out of format.
        http_retries: tries sent again after a 429, a 5xx or an unreachable judge.
        posted: rewards posted; ``None`` on a dry run (nothing posted).
        primary: the name of the rubric's primary reward.
    """

    requests: int
    cache_hits: int
    retries: int
    http_retries: int
    posted: int | None
    primary: str


@dataclass(frozen=True)
class RescoreResult:
    """Every re-scored rollout, in store order.

    ``primary_names`` keeps each rollout's current primary reward name (``None``: no reward
    named one), which ``write_rewards`` needs to leave the reward as it is. ``judge`` is set
    when a judge scored them (``fulmen.debugging.rescore_judge``).
    """

    items: tuple[RescoredRollout, ...]
    primary_names: dict[str, str | None]
    judge: JudgeTally | None = None

    @property
    def scored(self) -> list[RescoredRollout]:
        """Return the rollouts the function scored (it did not raise)."""
        return [i for i in self.items if i.new is not None]

    @property
    def failed(self) -> list[RescoredRollout]:
        """Return the rollouts on which the function raised."""
        return [i for i in self.items if i.error is not None]

    @property
    def changed(self) -> list[RescoredRollout]:
        """Return the scored rollouts whose reward changed (or had none before)."""
        return [i for i in self.scored if i.old is None or abs(i.change) > _CHANGED]

    def most_changed(self, count: int) -> list[RescoredRollout]:
        """Return up to ``count`` changed rollouts, largest absolute change first."""
        return sorted(self.changed, key=lambda i: -abs(i.change))[:count]


def load_reward_function(spec: str, *, python_path: Sequence[Path] = ()) -> RewardFunction:
    """Import the reward function ``spec`` names (``"module:function"``).

    ``python_path`` directories go on ``sys.path`` first. Raises ``ConfigError`` naming
    ``spec`` when it cannot be imported or is not callable.
    """
    put_first_on_sys_path(python_path)
    value = import_object(spec, what="reward function")
    if not callable(value):
        raise ConfigError(f"reward function {spec!r} is a {type(value).__name__}, not callable")
    return cast("RewardFunction", value)


async def rescore(
    store: Store, reward: RewardFunction, selection: RescoreFilter | None = None
) -> RescoreResult:
    """Apply ``reward`` to the rollouts ``selection`` picks; see the module docstring.

    The function may be sync or async; it returns a finite number (a ``bool`` counts as 0/1).
    An exception or a bad return value is kept as that rollout's ``error``, and the others
    are still scored.
    """
    from fulmen.transitions.trajectory import load_attempt

    selection = selection or RescoreFilter()
    items: list[RescoredRollout] = []
    primary_names: dict[str, str | None] = {}
    async for rollout in selected_rollouts(store, selection):
        attempt = await load_attempt(store, rollout.rollout_id)
        view = recorded_rollout(rollout, attempt)
        primary_names[rollout.rollout_id] = _primary_name(attempt)
        air = signal_counts(attempt)
        try:
            value = await _call(reward, view)
        except Exception as exc:  # the user's function: report it, score the rest
            error = f"{type(exc).__name__}: {exc}"
            items.append(RescoredRollout(view, view.reward, None, error, air))
            continue
        items.append(RescoredRollout(view, view.reward, value, air=air))
    return RescoreResult(tuple(items), primary_names)


async def _call(reward: RewardFunction, rollout: RecordedRollout) -> float:
    value: Any = reward(rollout)
    if inspect.isawaitable(value):
        value = await value
    if isinstance(value, bool):
        return float(value)
    if not isinstance(value, int | float) or not math.isfinite(value):
        raise TypeError(f"the reward function returned {value!r}, not a finite number")
    return float(value)


def signal_counts(records: AttemptRecords) -> dict[str, int]:
    """Count the calls of ``records`` on which each automatic intermediate reward fired."""
    from fulmen.transitions.air import call_signals

    counts: dict[str, int] = {}
    for fired in call_signals(records.calls, records.spans):
        for name in fired:
            counts[name] = counts.get(name, 0) + 1
    return counts


async def selected_rollouts(store: Store, selection: RescoreFilter) -> AsyncIterator[Rollout]:
    """Yield the succeeded rollouts matching ``selection``, oldest first, up to its limit."""
    from fulmen.types import RolloutQuery, RolloutStatus

    cursor: int | None = None
    taken = 0
    while taken < selection.limit:
        page = await store.query_rollouts(
            RolloutQuery(
                statuses=[RolloutStatus.SUCCEEDED],
                mode=selection.mode,
                task_id=selection.task_id,
                resources_version=selection.resources_version,
                cursor=cursor,
                limit=_PAGE,
            )
        )
        for rollout in page.items:
            if selection.since is not None and (
                rollout.ended_at is None or rollout.ended_at < selection.since
            ):
                continue
            yield rollout
            taken += 1
            if taken >= selection.limit:
                return
        if page.next_cursor is None:
            return
        cursor = page.next_cursor


async def write_rewards(
    store: Store,
    result: RescoreResult,
    *,
    name: str,
    primary: bool = False,
    source: str = "",
) -> int:
    """Store each changed or newly scored rollout's new reward as the value ``name``.

    Without ``primary`` the rollout's current reward stays its reward: the post also carries
    the current primary value under its own name and names it primary. Returns how many
    rewards were posted (unchanged rollouts get none).
    """
    from fulmen.types import RewardCreate

    posted = 0
    for item in result.changed:
        if item.new is None:
            continue
        values = {name: item.new}
        current = result.primary_names.get(item.rollout.rollout_id)
        keep = None if primary or current is None or item.old is None else current
        if keep is not None and keep != name:
            values[keep] = item.old if item.old is not None else 0.0
        chosen = name if keep is None or keep == name else keep
        key = _reward_key(item.rollout.rollout_id, name, item.new, chosen)
        await store.add_reward(
            RewardCreate(
                rollout_id=item.rollout.rollout_id,
                values=values,
                primary=chosen,
                key=key,
                metadata={"source": "fulmen rescore", "function": source},
            )
        )
        posted += 1
    return posted


def _primary_name(records: AttemptRecords) -> str | None:
    """Return the name of the rollout's current primary reward (latest that names one)."""
    from fulmen.tracing import semconv

    named = [(e.sequence, e.primary) for e in semconv.reward_events(records.spans)]
    named += [(r.sequence, r.primary) for r in records.rewards]
    current: str | None = None
    for _, name in sorted(named, key=lambda e: e[0]):
        if name is not None:
            current = name
    return current


def _reward_key(rollout_id: str, name: str, value: float, primary: str) -> str:
    digest = hashlib.blake2b(f"{rollout_id}\0{name}\0{value!r}\0{primary}".encode(), digest_size=12)
    return f"rescore-{digest.hexdigest()}"
