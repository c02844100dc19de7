"""The rollout queue: rollouts, their attempts, the workers that run them, resources, waiting.

``RolloutQueue`` is the face a runner, a trainer publishing tasks, or the watchdog depends on.
Each public method checks its plain arguments (``fulmen.store.arguments``) and enters the
store's read or write section; the backend implements only the work, in the ``_``-prefixed
method of the same name, with arguments already checked and sequences already lists.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING

from fulmen.errors import InvalidRequest
from fulmen.store.arguments import check_arguments
from fulmen.store.roles.core import ReconcileReport, StoreCore
from fulmen.types._unset import UNSET

if TYPE_CHECKING:
    from pydantic import JsonValue

    from fulmen.types import (
        Attempt,
        AttemptStatus,
        Claim,
        Mode,
        Page,
        Resources,
        ResourcesCreate,
        Rollout,
        RolloutCreate,
        RolloutQuery,
        RolloutStatus,
        Unset,
        Worker,
    )
    from fulmen.types.sessions import SessionCreate

__all__ = ["RolloutQueue"]


class RolloutQueue(StoreCore, ABC):
    """Queue, claim and finish rollouts; workers' heartbeats; resource versions; waiting."""

    async def enqueue(self, rollouts: Sequence[RolloutCreate]) -> list[Rollout]:
        """Queue rollouts in order.

        An existing ``rollout_id`` with the same content is returned as is; with different
        content it raises ``Conflict``. An unknown ``resources_version`` raises ``NotFound``;
        ``None`` takes the latest version (or none if there is none yet).
        """
        if not rollouts:
            return []
        async with self._writing:
            return await self._enqueue(list(rollouts))

    async def claim(
        self,
        worker_id: str,
        *,
        limit: int = 1,
        modes: Sequence[Mode] | None = None,
        claim_id: str | None = None,
    ) -> list[Claim]:
        """Atomically take up to ``limit`` queuing rollouts, oldest first.

        Each claim creates one running attempt. No rollout is ever given to two claims.
        Repeating a call with the same ``claim_id`` returns the first call's claims instead of
        taking more.
        """
        if limit < 1:
            raise InvalidRequest(f"limit must be at least 1, got {limit}")
        check_arguments(worker_id=worker_id, claim_id=claim_id)
        wanted = list(modes) if modes is not None else None
        async with self._writing:
            return await self._claim(worker_id, limit, wanted, claim_id)

    async def heartbeat(
        self,
        worker_id: str,
        *,
        attempt_ids: Sequence[str] = (),
        metadata: dict[str, JsonValue] | None = None,
    ) -> Worker:
        """Record that a worker is alive and still running ``attempt_ids``."""
        check_arguments(worker_id=worker_id, attempt_ids=attempt_ids, metadata=metadata)
        async with self._writing:
            return await self._heartbeat(worker_id, list(attempt_ids), metadata)

    async def update_attempt(
        self,
        attempt_id: str,
        *,
        status: AttemptStatus | Unset = UNSET,
        error: str | Unset | None = UNSET,
    ) -> Attempt:
        """Report an attempt's outcome (``succeeded``, ``failed`` or ``released``).

        The rollout moves per the lifecycle rules. A report on an attempt that is already final
        is kept in ``late_status``/``late_error`` and changes nothing else.
        """
        if error is not UNSET:
            check_arguments(error=error)
        async with self._writing:
            return await self._update_attempt(attempt_id, status, error)

    async def update_rollout(
        self,
        rollout_id: str,
        *,
        status: RolloutStatus | Unset = UNSET,
        metadata: dict[str, JsonValue] | Unset = UNSET,
    ) -> Rollout:
        """Change a rollout's metadata, or cancel it (the only status a caller may set).

        Cancelling a final rollout raises ``InvalidTransition``.
        """
        if metadata is not UNSET:
            check_arguments(metadata=metadata)
        async with self._writing:
            return await self._update_rollout(rollout_id, status, metadata)

    async def record_session(self, session: SessionCreate) -> Claim:
        """Store a closed production session as a finished rollout with one more attempt.

        The rollout ``session-<session_id>`` (mode ``production``, ``succeeded``) is created
        the first time and gets one new succeeded attempt ``session.attempt_id`` each time;
        the caller then adds the session's LLM calls to that attempt. The same ``attempt_id``
        again returns what was stored; a rollout of that id that is not a finished production
        session raises ``Conflict``.
        """
        async with self._writing:
            return await self._record_session(session)

    async def get_rollout(self, rollout_id: str) -> Rollout:
        """One rollout, or ``NotFound``."""
        async with self._reading:
            return await self._get_rollout(rollout_id)

    async def get_attempt(self, attempt_id: str) -> Attempt:
        """One attempt, or ``NotFound``."""
        async with self._reading:
            return await self._get_attempt(attempt_id)

    async def list_attempts(self, rollout_id: str) -> list[Attempt]:
        """Return the attempts of a rollout, by number; ``NotFound`` for an unknown rollout."""
        async with self._reading:
            return await self._list_attempts(rollout_id)

    async def query_rollouts(self, query: RolloutQuery) -> Page[Rollout]:
        """Rollouts matching ``query`` in enqueue order, one page at a time."""
        async with self._reading:
            return await self._query_rollouts(query)

    async def list_workers(self) -> list[Worker]:
        """Every worker that sent a heartbeat."""
        async with self._reading:
            return await self._list_workers()

    async def wait_for_rollouts(
        self, rollout_ids: Sequence[str], *, timeout: float
    ) -> list[Rollout]:
        """Wait, without busy polling, for rollouts to become final.

        Waits until every listed rollout is final or ``timeout`` seconds pass; returns the ones
        that are final, in the order asked.
        """
        # No section: the backend waits its own way and must not hold the lock meanwhile.
        return await self._wait_for_rollouts(list(rollout_ids), max(timeout, 0.0))

    async def reconcile(self) -> ReconcileReport:
        """Run one watchdog pass.

        Ends attempts past their timeout or heartbeat deadline and retries or fails their
        rollouts. Safe to run from several processes at once.
        """
        async with self._reading:
            return await self._reconcile()

    async def add_resources(self, resources: ResourcesCreate) -> Resources:
        """Store a new immutable snapshot as the next version (idempotent by ``resources_id``)."""
        async with self._writing:
            return await self._add_resources(resources)

    async def get_resources(self, version: int) -> Resources:
        """One version, or ``NotFound``."""
        async with self._reading:
            return await self._get_resources(version)

    async def latest_resources(self) -> Resources | None:
        """Return the highest version, or ``None`` when no resources were added."""
        async with self._reading:
            return await self._latest_resources()

    # -- the backend's work ----------------------------------------------------------------------

    @abstractmethod
    async def _enqueue(self, rollouts: list[RolloutCreate]) -> list[Rollout]: ...

    @abstractmethod
    async def _claim(
        self, worker_id: str, limit: int, modes: list[Mode] | None, claim_id: str | None
    ) -> list[Claim]: ...

    @abstractmethod
    async def _heartbeat(
        self, worker_id: str, attempt_ids: list[str], metadata: dict[str, JsonValue] | None
    ) -> Worker: ...

    @abstractmethod
    async def _update_attempt(
        self, attempt_id: str, status: AttemptStatus | Unset, error: str | Unset | None
    ) -> Attempt: ...

    @abstractmethod
    async def _update_rollout(
        self,
        rollout_id: str,
        status: RolloutStatus | Unset,
        metadata: dict[str, JsonValue] | Unset,
    ) -> Rollout: ...

    @abstractmethod
    async def _record_session(self, session: SessionCreate) -> Claim: ...

    @abstractmethod
    async def _get_rollout(self, rollout_id: str) -> Rollout: ...

    @abstractmethod
    async def _get_attempt(self, attempt_id: str) -> Attempt: ...

    @abstractmethod
    async def _list_attempts(self, rollout_id: str) -> list[Attempt]: ...

    @abstractmethod
    async def _query_rollouts(self, query: RolloutQuery) -> Page[Rollout]: ...

    @abstractmethod
    async def _list_workers(self) -> list[Worker]: ...

    @abstractmethod
    async def _wait_for_rollouts(self, rollout_ids: list[str], timeout: float) -> list[Rollout]: ...

    @abstractmethod
    async def _reconcile(self) -> ReconcileReport: ...

    @abstractmethod
    async def _add_resources(self, resources: ResourcesCreate) -> Resources: ...

    @abstractmethod
    async def _get_resources(self, version: int) -> Resources: ...

    @abstractmethod
    async def _latest_resources(self) -> Resources | None: ...
