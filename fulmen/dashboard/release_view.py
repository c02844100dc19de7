"""Canary releases as the dashboard serves them: the list, and one release with its figures.

One release's answer is what ``fulmen release status --json`` prints, from the same code:
``fulmen.release.ReleaseOutcomes`` reads each session's arm and latest reward from the store and
``fulmen.release.release_figures`` computes each arm's sessions, rewarded sessions and mean
with its 95% interval, and Welch's comparison of the arms. This module only checks the name a
web request gives and keeps one ``ReleaseOutcomes`` per release (at most ``MAX_FOLLOWED``), so
the store's production rollouts are listed once, from its cursor, while every session's reward
is read again on each request (a reward may come hours after its session): a request costs one
small read per session of the release, which is why the page asks at most every 10 seconds.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from fulmen.release import ReleaseOutcomes, release_figures
from fulmen.store.releases import check_release_name

if TYPE_CHECKING:
    from fulmen.store.base import Store
    from fulmen.types.releases import Release

__all__ = ["MAX_FOLLOWED", "ReleaseViews", "release_summary"]

#: Releases whose session cursor the dashboard keeps; past it the least recently asked is
#: dropped (and lists the production rollouts again when asked next).
MAX_FOLLOWED = 64


def release_summary(release: Release) -> dict[str, Any]:
    """Return ``release`` as one row of the list: its definition and state, not its events.

    ``event_count`` says how many events it holds; ``GET /api/releases/{name}`` returns them.
    """
    row = release.model_dump(mode="json", exclude={"events"})
    row["event_count"] = len(release.events)
    return row


class ReleaseViews:
    """The releases routes' reads over ``store``, with one ``ReleaseOutcomes`` per release."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._followed: dict[str, tuple[ReleaseOutcomes, asyncio.Lock]] = {}

    async def listing(self) -> dict[str, Any]:
        """Return every release, latest created first, as ``release_summary`` rows."""
        return {"items": [release_summary(r) for r in await self._store.list_releases()]}

    async def detail(self, name: str) -> dict[str, Any]:
        """Return the release with its events and its arms' figures (``fulmen release status``).

        The answer is ``{"release", "incumbent", "candidate", "comparison"}`` as ``fulmen
        release status --json`` prints it. A release the store does not hold is a ``NotFound``
        (404) naming it; a name that cannot be one is an ``InvalidRequest`` (422).
        """
        release = await self._store.get_release(check_release_name(name))
        outcomes, lock = self._follow(name)
        async with lock:  # one reader at a time moves a release's cursor
            figures = release_figures(await outcomes.read())
        return {"release": release.model_dump(mode="json"), **figures.as_json()}

    def _follow(self, name: str) -> tuple[ReleaseOutcomes, asyncio.Lock]:
        followed = self._followed.pop(name, None)
        if followed is None:
            followed = (ReleaseOutcomes(self._store, name), asyncio.Lock())
        self._followed[name] = followed  # the most recently asked last
        while len(self._followed) > MAX_FOLLOWED:
            del self._followed[next(iter(self._followed))]
        return followed
