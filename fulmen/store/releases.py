"""The rules of releases, shared by every backend: creating one, and what a decision may do.

The memory store and the SQL store keep a release as one record; both decide here whether a
``put_release`` repeats an existing definition (a no-op) or contradicts it (``Conflict``), and
which state changes a decision may make: ``canary`` to ``promoted`` or ``rolled_back``, and
``promoted`` to ``rolled_back`` (the way back after a promotion). A decision whose
``event_id`` the release already holds returns it unchanged, so a retried request is applied
once.
"""

from __future__ import annotations

from typing import Any, Final

from pydantic import TypeAdapter, ValidationError

from fulmen.errors import Conflict, InvalidRequest, NotFound
from fulmen.types.limits import Id
from fulmen.types.releases import (
    MAX_RELEASE_EVENTS,
    Release,
    ReleaseCreate,
    ReleaseDecision,
    ReleaseEvent,
    ReleaseState,
)

__all__ = ["check_release_name", "decided_release", "missing_release", "new_release"]

_NAME: Final[TypeAdapter[Any]] = TypeAdapter(Id)

# The states each decision may start from.
_FROM: Final = {
    "promoted": {ReleaseState.CANARY},
    "rolled_back": {ReleaseState.CANARY, ReleaseState.PROMOTED},
}
_TO: Final = {"promoted": ReleaseState.PROMOTED, "rolled_back": ReleaseState.ROLLED_BACK}


def check_release_name(name: str) -> str:
    """Return ``name`` if it can be a release's name (an ``Id``: 1 to 128 characters, no NUL).

    Anything else raises ``InvalidRequest`` naming what was given (cut to 80 characters).
    """
    try:
        return _NAME.validate_python(name)
    except ValidationError:
        raise InvalidRequest(
            f"not a release name (1 to 128 characters, no NUL): {name[:80]!r}",
            detail={"length": len(name)},
        ) from None


def missing_release(name: str) -> NotFound:
    """Return the error for a release the store does not hold."""
    return NotFound(f"release {name!r} does not exist", detail={"name": name})


def new_release(create: ReleaseCreate, stored: Release | None, now: float) -> Release:
    """Return the release to store for ``put_release`` (``stored``: the one of that name).

    The same definition again returns ``stored`` as it is, whatever its state; another
    definition under a stored name raises ``Conflict``.
    """
    if stored is not None:
        if stored.definition() == create.definition():
            return stored
        raise Conflict(
            f"release {create.name!r} exists with another definition (its arms, share or seed "
            "differ): give the new release another name",
            detail={"name": create.name},
        )
    created = ReleaseEvent(
        event_id="created",
        kind="created",
        at=now,
        by="store",
        reason=f"{create.share:.0%} of sessions to the candidate",
    )
    return Release(
        **create.definition().model_dump(),
        created_at=now,
        updated_at=now,
        events=[created],
    )


def decided_release(release: Release, decision: ReleaseDecision, now: float) -> Release:
    """Return ``release`` with ``decision`` applied (itself if the event is already there).

    Raises ``Conflict`` when ``expected_revision`` is stale or the state change is not allowed
    from the release's state.
    """
    if any(e.event_id == decision.event_id for e in release.events):
        return release
    if decision.expected_revision is not None and decision.expected_revision != release.revision:
        raise Conflict(
            f"release {release.name!r} changed since revision {decision.expected_revision} "
            f"(now {release.revision}, {release.state.value}): read it again and decide anew",
            detail={"name": release.name, "revision": release.revision},
        )
    state = release.state
    if decision.kind in _FROM:
        if state not in _FROM[decision.kind]:
            raise Conflict(
                f"release {release.name!r} is {state.value}: it cannot be "
                f"{decision.kind.replace('_', ' ')}",
                detail={"name": release.name, "state": state.value},
            )
        state = _TO[decision.kind]
    event = ReleaseEvent(
        event_id=decision.event_id,
        kind=decision.kind,
        at=now,
        by=decision.by,
        reason=decision.reason,
        figures=decision.figures,
    )
    events = [*release.events, event]
    if len(events) > MAX_RELEASE_EVENTS:
        oldest_window = next((i for i, e in enumerate(events) if e.kind == "window"), 0)
        del events[oldest_window]
    return release.model_copy(
        update={
            "state": state,
            "revision": release.revision + 1,
            "updated_at": now,
            "events": events,
        }
    )
