"""The release book: canary releases of a model version and the decisions taken on them.

``ReleaseBook`` is the face the release controller and ``fulmen release`` depend on; what a
release is and how a decision moves it are in ``fulmen.types.releases`` and
``fulmen.store.releases``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

from fulmen.store.releases import check_release_name
from fulmen.store.roles.core import StoreCore

if TYPE_CHECKING:
    from fulmen.types.releases import Release, ReleaseCreate, ReleaseDecision

__all__ = ["ReleaseBook"]


class ReleaseBook(StoreCore, ABC):
    """Store releases by name and append the decisions of their gates."""

    async def put_release(self, release: ReleaseCreate) -> Release:
        """Store a new release in the ``canary`` state; idempotent by name.

        The same definition again returns the stored release (whatever its state); another
        definition under a stored name raises ``Conflict``. See ``fulmen.types.releases``.
        """
        async with self._writing:
            return await self._put_release(release)

    async def get_release(self, name: str) -> Release:
        """Return the release of that name; ``NotFound`` if there is none."""
        check_release_name(name)
        async with self._reading:
            return await self._get_release(name)

    async def list_releases(self) -> list[Release]:
        """Return every release, latest created first."""
        async with self._reading:
            return await self._list_releases()

    async def decide_release(self, name: str, decision: ReleaseDecision) -> Release:
        """Append ``decision`` to the release's events and move its state as it says.

        ``promoted`` and ``rolled_back`` change the state (``Conflict`` where the state does
        not allow it, or when ``expected_revision`` is stale); ``window`` records the gate's
        figures. A decision whose ``event_id`` the release holds returns it unchanged.
        """
        check_release_name(name)
        async with self._writing:
            return await self._decide_release(name, decision)

    # -- the backend's work ----------------------------------------------------------------------

    @abstractmethod
    async def _put_release(self, release: ReleaseCreate) -> Release: ...

    @abstractmethod
    async def _get_release(self, name: str) -> Release: ...

    @abstractmethod
    async def _list_releases(self) -> list[Release]: ...

    @abstractmethod
    async def _decide_release(self, name: str, decision: ReleaseDecision) -> Release: ...
