"""``InMemoryLightningStore``: 0.x's in-memory store, a fulmen ``MemoryStore`` behind the facade."""

from __future__ import annotations

from fulmen.compat.agentlightning.store_facade import LightningStore

__all__ = ["InMemoryLightningStore"]


class InMemoryLightningStore(LightningStore):
    """0.x's in-memory store: a fulmen ``MemoryStore`` behind the facade.

    Create it inside a running event loop (its watchdog is an asyncio task); ``close()`` it.
    """

    def __init__(self, *, watchdog_interval: float | None = 1.0) -> None:
        from fulmen.store.memory import MemoryStore
        from fulmen.store.watchdog import Watchdog

        super().__init__(MemoryStore(), url="memory://")
        self._owned = True
        self._watchdog: Watchdog | None = None
        if watchdog_interval is not None:
            self._watchdog = Watchdog(self.store, interval=watchdog_interval)
            self._watchdog.start()

    async def close(self) -> None:
        """Stop the watchdog and close the store."""
        if self._watchdog is not None:
            await self._watchdog.stop()
        await super().close()
