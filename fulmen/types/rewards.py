"""Rewards posted to the store after the fact, and the retention (prune) request and report.

A reward that arrives when the agent has long finished (a user's thumbs-up, a ticket closed)
is a ``RewardCreate`` sent to ``Store.add_reward``. It names its rollout directly, through the
response id of one of the rollout's LLM calls, or through a session id (a production session
is stored as a finished rollout whose id is ``session_rollout_id(session_id)``). The store
gives it the rollout's next sequence number, the same counter its spans and calls draw from,
so "the latest reward" is the one with the highest sequence number, whether it was a reward
span emitted during the run or a reward posted afterwards.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Final, Self, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from fulmen.types.limits import MAX_ID_LENGTH, FiniteFloat, Id, JsonData
from fulmen.types.rollout import Mode

__all__ = [
    "DEFAULT_REWARD_NAME",
    "MAX_REWARD_VALUES",
    "SCORING_ERROR_KEY",
    "SESSION_ROLLOUT_PREFIX",
    "PruneReport",
    "PruneRequest",
    "Reward",
    "RewardCreate",
    "RewardName",
    "RewardRange",
    "SessionId",
    "session_rollout_id",
]

DEFAULT_REWARD_NAME: Final = "reward"
"""The name a scalar reward is stored under (the same name ``emit_reward`` uses)."""

MAX_REWARD_VALUES: Final = 64

SCORING_ERROR_KEY: Final = "scoring_error"
"""A posted reward whose ``metadata`` has this key (a string saying why the rollout could not
be scored, e.g. its judge failed) withdraws the rollout's reward: the rollout has no primary
reward until a later reward names one (``fulmen.transitions.signals.latest_reward``)."""
SESSION_ROLLOUT_PREFIX: Final = "session-"

RewardName: TypeAlias = Annotated[
    str, StringConstraints(min_length=1, max_length=256, pattern="^[^\\u0000]*$")
]
"""The name of one reward value: 1 to 256 characters, no NUL."""

SessionId: TypeAlias = Annotated[
    str,
    StringConstraints(
        min_length=1,
        max_length=MAX_ID_LENGTH - len(SESSION_ROLLOUT_PREFIX),
        pattern="^[^\\u0000]*$",
    ),
]
"""A production session id: short enough that its rollout id is a valid ``Id``, no NUL."""


def session_rollout_id(session_id: str) -> str:
    """Return the rollout id a production session is stored under (``session-<id>``)."""
    return f"{SESSION_ROLLOUT_PREFIX}{session_id}"


class RewardRange(BaseModel):
    """The values a reward may take where rewards cross a trust boundary (the gateway's route).

    An agent that posts its own reward is optimised against it; a range keeps one post from
    swamping a group's statistics (``-1e308``, say). Both ends are included.

    Attributes:
        min: the lowest value accepted (default ``-1e6``).
        max: the highest value accepted (default ``1e6``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    min: FiniteFloat = -1e6
    max: FiniteFloat = 1e6

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.min > self.max:
            raise ValueError(f"reward range min {self.min:g} is above max {self.max:g}")
        return self

    def outside(self, values: dict[str, float]) -> str | None:
        """Return the name of the first value outside the range; ``None`` when all are in it."""
        for name, value in values.items():
            if not self.min <= value <= self.max:
                return name
        return None


class RewardCreate(BaseModel):
    """A reward for a rollout, posted while or after it ran.

    Attributes:
        rollout_id / response_id / session_id: exactly one names the rollout: directly, by the
            response id of one of its LLM calls (the reward then belongs to that call's
            attempt), or by a production session id.
        values: the reward's named values (a scalar reward is ``{"reward": x}``); finite.
        primary: the name among ``values`` that is the rollout's reward. Left out, it is
            ``"reward"`` when that name is present, else the only name when there is one, else
            none (the values are kept, the rollout's primary reward is not changed).
        key: the client's idempotency key: posting the same key again returns the stored
            reward; the same key with other content is a ``Conflict``. Left out, the store
            picks one and every post is a new reward.
        metadata: free-form JSON kept with the reward (who or what gave it).
    """

    model_config = ConfigDict(extra="forbid")

    rollout_id: Id | None = None
    response_id: Id | None = None
    session_id: SessionId | None = None
    values: dict[RewardName, FiniteFloat] = Field(min_length=1, max_length=MAX_REWARD_VALUES)
    primary: RewardName | None = None
    key: Id | None = None
    metadata: dict[str, JsonData] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> Self:
        targets = [
            name
            for name in ("rollout_id", "response_id", "session_id")
            if getattr(self, name) is not None
        ]
        if len(targets) != 1:
            raise ValueError(
                f"name exactly one of rollout_id, response_id, session_id; got {targets or 'none'}"
            )
        if self.primary is None:
            if DEFAULT_REWARD_NAME in self.values:
                self.primary = DEFAULT_REWARD_NAME
            elif len(self.values) == 1:
                self.primary = next(iter(self.values))
        elif self.primary not in self.values:
            raise ValueError(f"primary {self.primary!r} is not one of the values' names")
        return self

    @classmethod
    def scalar(cls, value: float, **target: str | None) -> RewardCreate:
        """Build a scalar reward ``{"reward": value}``; ``target`` as the keyword fields."""
        return cls.model_validate({"values": {DEFAULT_REWARD_NAME: value}, **target})

    def target_rollout_id(self) -> str | None:
        """Return the rollout id this reward names without a lookup (``None``: by response)."""
        if self.session_id is not None:
            return session_rollout_id(self.session_id)
        return self.rollout_id


class Reward(BaseModel):
    """A stored reward: what was posted, the rollout it resolved to and its sequence number.

    Attributes:
        key: the idempotency key (the client's, or one the store chose).
        rollout_id: the rollout the reward belongs to.
        attempt_id: the attempt of the call named by ``response_id``; ``None`` for a reward
            given to the rollout as a whole (it applies to whichever attempt is read).
        sequence: from the rollout's counter shared with spans and calls; the highest is the
            latest.
        created_at: when the store accepted it.
    """

    model_config = ConfigDict(extra="forbid")

    key: Id
    rollout_id: Id
    attempt_id: Id | None = None
    response_id: Id | None = None
    session_id: SessionId | None = None
    values: dict[RewardName, FiniteFloat]
    primary: RewardName | None = None
    metadata: dict[str, JsonData] = Field(default_factory=dict)
    sequence: int
    created_at: datetime

    def same_request(self, request: RewardCreate) -> bool:
        """Tell whether ``request`` (same key) asks for exactly this reward."""
        return (
            request.rollout_id in (None, self.rollout_id)
            and request.response_id == self.response_id
            and request.session_id == self.session_id
            and request.values == self.values
            and request.primary == self.primary
            and request.metadata == self.metadata
        )


class PruneRequest(BaseModel):
    """Which finished rollouts ``Store.prune`` deletes, with everything recorded for them.

    Attributes:
        ended_before: rollouts that ended (succeeded, failed or cancelled) before this time.
        keep_rewarded: keep rollouts that have a reward (a posted one or a reward span).
        modes: only rollouts of these modes; ``None`` for every mode.
        dry_run: count what would be deleted and delete nothing.
    """

    model_config = ConfigDict(extra="forbid")

    ended_before: datetime
    keep_rewarded: bool = False
    modes: list[Mode] | None = None
    dry_run: bool = False

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.ended_before.tzinfo is None:
            raise ValueError("ended_before must carry a time zone (e.g. 2026-01-01T00:00:00Z)")
        try:  # stored as UTC: a time whose UTC value is outside years 1-9999 cannot be compared
            self.ended_before = self.ended_before.astimezone(UTC)
        except OverflowError:
            raise ValueError(
                f"ended_before {self.ended_before.isoformat()} is outside years 1-9999 in UTC"
            ) from None
        return self


class PruneReport(BaseModel):
    """What ``Store.prune`` deleted (or, on a dry run, would delete), by kind of record."""

    model_config = ConfigDict(extra="forbid")

    dry_run: bool
    rollouts: int = 0
    attempts: int = 0
    spans: int = 0
    llm_calls: int = 0
    rewards: int = 0
