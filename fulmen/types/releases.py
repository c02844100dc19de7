"""Canary releases: an incumbent and a candidate model served side by side to production traffic.

A release is stored by name (``Store.put_release``). The gateway sends each production session
to one of its two arms, decided by a seeded hash of the session id against ``share`` (the
candidate's share of sessions), and records the arm on every call and session. The release's
state says what the gateway serves: both arms while it is ``canary``, only the candidate once
``promoted``, only the incumbent once ``rolled_back``. Every change, and every window the
promotion gate evaluates, is a ``ReleaseEvent`` appended by ``Store.decide_release``; the
release's ``revision`` counts them, so a decision made on stale figures can be refused.

Times are Unix seconds of the store's clock.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Final, Literal, Self, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from fulmen.types.limits import FiniteFloat, Id, Int32, Int64, JsonData, Label

__all__ = [
    "MAX_RELEASE_EVENTS",
    "ArmModel",
    "Release",
    "ReleaseArm",
    "ReleaseCreate",
    "ReleaseDecision",
    "ReleaseEvent",
    "ReleaseState",
]

MAX_RELEASE_EVENTS: Final = 1000
"""The most events a release keeps; past it the oldest ``window`` events are dropped (state
changes are always kept)."""

_Reason: TypeAlias = Annotated[str, StringConstraints(max_length=4096, pattern="^[^\\u0000]*$")]


class ReleaseArm(StrEnum):
    """One side of a release: the model serving today, or the one being tried."""

    INCUMBENT = "incumbent"
    CANDIDATE = "candidate"


class ReleaseState(StrEnum):
    """What the gateway serves: both arms (``canary``), or one arm to every session."""

    CANARY = "canary"
    PROMOTED = "promoted"
    ROLLED_BACK = "rolled_back"


class ArmModel(BaseModel):
    """What one arm serves: a model name the upstream answers to, and where it came from.

    Attributes:
        model: the model name sent upstream for this arm's calls (an adapter the engine
            serves under that name, the engine's base model, or any hosted model's name).
        run_id / version: the store's model version this arm serves, when it is one
            (``fulmen models list``); both or neither.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: Label
    run_id: Id | None = None
    version: Int32 | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _both_or_neither(self) -> Self:
        if (self.run_id is None) != (self.version is None):
            raise ValueError("give run_id and version together (a model version of the store)")
        return self


class ReleaseCreate(BaseModel):
    """A release as defined: its name, its two arms, the candidate's share and the hash seed.

    Attributes:
        name: the release's id in the store.
        incumbent / candidate: what each arm serves (``ArmModel``); their model names differ.
        share: the fraction of sessions sent to the candidate while the release is a canary.
        seed: the seed of the hash that assigns sessions to arms; another seed, another split.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Id
    incumbent: ArmModel
    candidate: ArmModel
    share: FiniteFloat = Field(ge=0, le=1)
    seed: Int64 = 0

    @model_validator(mode="after")
    def _distinct_models(self) -> Self:
        if self.incumbent.model == self.candidate.model:
            raise ValueError(
                f"incumbent and candidate both serve model {self.incumbent.model!r}: the arms "
                "must reach different models"
            )
        return self

    def definition(self) -> ReleaseCreate:
        """Return the release's definition alone (what ``put_release`` compares)."""
        return ReleaseCreate(
            name=self.name,
            incumbent=self.incumbent,
            candidate=self.candidate,
            share=self.share,
            seed=self.seed,
        )

    def serving(self, arm: ReleaseArm) -> ArmModel:
        """Return what ``arm`` serves."""
        return self.incumbent if arm is ReleaseArm.INCUMBENT else self.candidate


EventKind: TypeAlias = Literal["created", "window", "promoted", "rolled_back"]


class ReleaseEvent(BaseModel):
    """One thing that happened to a release, as the store keeps it.

    Attributes:
        event_id: the caller's id of the decision (a retried request is stored once).
        kind: ``created``; ``window`` (the gate evaluated the arms and changed nothing);
            ``promoted`` or ``rolled_back`` (the state changed).
        at: when the store took it (its clock).
        by: who decided: ``gate``, ``cli``, a gateway's name.
        reason: why, in words.
        figures: the numbers the decision rests on (sessions, means, CIs, the test's p value).
    """

    model_config = ConfigDict(extra="forbid")

    event_id: Id
    kind: EventKind
    at: FiniteFloat
    by: Label
    reason: _Reason = ""
    figures: dict[Label, JsonData] = Field(default_factory=dict, max_length=64)


class ReleaseDecision(BaseModel):
    """A decision sent to ``Store.decide_release``: an event, and the state it moves to.

    Attributes:
        event_id: chosen by the caller; the same id again returns the release unchanged.
        kind: ``window``, ``promoted`` or ``rolled_back`` (see ``ReleaseEvent``).
        by / reason / figures: as in ``ReleaseEvent``.
        expected_revision: when set, the store refuses the decision (``Conflict``) if the
            release has changed since the caller read it at this revision.
    """

    model_config = ConfigDict(extra="forbid")

    event_id: Id
    kind: Literal["window", "promoted", "rolled_back"]
    by: Label
    reason: _Reason = ""
    figures: dict[Label, JsonData] = Field(default_factory=dict, max_length=64)
    expected_revision: Int64 | None = None


class Release(ReleaseCreate):
    """A stored release: its definition, its state and its history.

    Attributes:
        state: what the gateway serves now (``ReleaseState``).
        revision: the number of events appended so far (1 after ``created``).
        created_at / updated_at: the store's clock when it was put and last changed.
        events: its events, oldest first (at most ``MAX_RELEASE_EVENTS``).
    """

    state: ReleaseState = ReleaseState.CANARY
    revision: Int64 = 1
    created_at: FiniteFloat
    updated_at: FiniteFloat
    events: list[ReleaseEvent] = Field(default_factory=list)
