"""``MemoryResources``: the resources versions of a ``MemoryStore``.

A list behind the memory store's lock (the store calls these methods with it held): version
``n`` is item ``n - 1``, so versions are 1, 2, ... in the order they were added.
"""

from __future__ import annotations

from fulmen.errors import Conflict, NotFound
from fulmen.store.clock import new_id, utc_now
from fulmen.types import Resources, ResourcesCreate

__all__ = ["MemoryResources"]


class MemoryResources:
    """Resources versions in order, and an index by ``resources_id`` for idempotent adds."""

    def __init__(self) -> None:
        self._versions: list[Resources] = []
        self._by_id: dict[str, Resources] = {}

    @property
    def latest_version(self) -> int:
        """The newest version number; 0 while none was added."""
        return len(self._versions)

    def add(self, resources: ResourcesCreate) -> Resources:
        """See ``Store.add_resources``."""
        if resources.resources_id is not None and resources.resources_id in self._by_id:
            existing = self._by_id[resources.resources_id]
            if existing.resources != resources.resources or existing.metadata != resources.metadata:
                raise Conflict(
                    f"resources {resources.resources_id} already exist with other content"
                )
            return existing
        stored = Resources(
            version=len(self._versions) + 1,
            resources_id=resources.resources_id or new_id("res"),
            resources=resources.resources,
            metadata=resources.metadata,
            created_at=utc_now(),
        )
        self._versions.append(stored)
        self._by_id[stored.resources_id] = stored
        return stored

    def get(self, version: int) -> Resources:
        """See ``Store.get_resources``."""
        if not 1 <= version <= len(self._versions):
            raise NotFound(f"resources version {version} does not exist")
        return self._versions[version - 1]

    def latest(self) -> Resources | None:
        """See ``Store.latest_resources``."""
        return self._versions[-1] if self._versions else None
