"""``LightningStore``: the 0.x store methods user code and custom algorithms call, on fulmen's.

A facade over any fulmen store (``memory://``, SQLite, PostgreSQL, ``http://``), so 0.x
algorithm code keeps its calls while fulmen's store keeps its rules. The lifecycle follows the
0.x store contract (``queuing → preparing → running → succeeded | failed | cancelled``, a
failure retried as ``requeuing`` while ``retry_condition`` and ``max_attempts`` allow it);
statuses and ids translate as ``fulmen.compat.agentlightning.rollouts`` says.

Where fulmen's rules are stricter, the call is refused (``NotSupported``) instead of behaving
otherwise: resources are immutable (``update_resources``), attempts are made only by claims
(``start_rollout``, ``start_attempt``), only the watchdog times attempts out, and a rollout's
input, mode and resources are fixed once enqueued. A span added through the facade is also a
heartbeat of its attempt, as in 0.x.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, Literal

from fulmen.compat.agentlightning.errors import NotSupported
from fulmen.compat.agentlightning.resources import (
    ResourcesUpdate,
    snapshot_from_fulmen,
    snapshot_to_fulmen,
)
from fulmen.compat.agentlightning.rollouts import (
    Attempt,
    AttemptedRollout,
    Rollout,
    RolloutConfig,
    attempt_from_fulmen,
    config_to_fulmen,
    mode_to_fulmen,
    rollout_from_fulmen,
    rollout_statuses_to_fulmen,
)
from fulmen.compat.agentlightning.spans import Span, call_span, span_from_fulmen
from fulmen.errors import NotFound
from fulmen.types import (
    UNSET,
    AttemptStatus,
    RolloutCreate,
    RolloutQuery,
    RolloutStatus,
    SpanCreate,
    SpanStatus,
    Unset,
)
from fulmen.types import Span as FulmenSpan

if TYPE_CHECKING:
    from fulmen.store.base import Store
    from fulmen.types import Attempt as FulmenAttempt
    from fulmen.types import Rollout as FulmenRollout

__all__ = ["LightningStore"]

_REPORTED = {"succeeded": AttemptStatus.SUCCEEDED, "failed": AttemptStatus.FAILED}


class LightningStore:
    """0.x's store API on a fulmen ``Store``.

    Args:
        store: the fulmen store to use (the facade does not close it unless it opened it).
        url: where it lives, so ``agl.Trainer(store=...)`` can hand fulmen its URL.
        worker_id: the worker name claims and heartbeats of this facade use.
    """

    def __init__(self, store: Store, *, url: str | None = None, worker_id: str = "agl") -> None:
        self.store = store
        self.url = url
        self.worker_id = worker_id
        self._owned = False

    @classmethod
    async def open(cls, url: str, **options: Any) -> LightningStore:
        """Open a fulmen store by URL (``fulmen.open_store``) behind the facade; ``close`` it."""
        from fulmen.store import open_store

        facade = cls(await open_store(url, **options), url=url)
        facade._owned = True
        return facade

    async def close(self) -> None:
        """Close the fulmen store if this facade opened it."""
        if self._owned:
            await self.store.aclose()

    # -- the queue ----------------------------------------------------------------------------

    async def enqueue_rollout(
        self,
        input: Any,
        mode: Literal["train", "val", "test"] | None = None,
        resources_id: str | None = None,
        config: RolloutConfig | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Rollout:
        """Queue a rollout (status ``queuing``); ``resources_id`` ``None`` takes the latest."""
        create = RolloutCreate(
            input=input,
            mode=mode_to_fulmen(mode),
            resources_version=_version(resources_id),
            config=config_to_fulmen(config),
            metadata=dict(metadata or {}),
        )
        (rollout,) = await self.store.enqueue([create])
        return rollout_from_fulmen(rollout)

    async def dequeue_rollout(self, worker_id: str | None = None) -> AttemptedRollout | None:
        """Claim the oldest queued rollout (``preparing``, a new attempt), or ``None``."""
        claims = await self.store.claim(worker_id or self.worker_id, limit=1)
        if not claims:
            return None
        claim = claims[0]
        attempted = rollout_from_fulmen(claim.rollout, claim.attempt, has_spans=False)
        return attempted  # type: ignore[return-value]

    async def start_rollout(self, *args: Any, **kwargs: Any) -> AttemptedRollout:
        """Refused: fulmen creates attempts only when a worker claims the oldest rollout."""
        raise NotSupported(
            "LightningStore.start_rollout",
            why="fulmen creates an attempt only by a claim, oldest rollout first",
            instead="enqueue_rollout(...) then dequeue_rollout()",
        )

    async def start_attempt(self, rollout_id: str) -> AttemptedRollout:
        """Refused: a new attempt comes from the rollout's retry config and a claim."""
        raise NotSupported(
            "LightningStore.start_attempt",
            why="fulmen retries by the rollout's config (max_attempts, retry_condition)",
            instead="RolloutConfig(max_attempts=..., retry_condition=[...]) at enqueue",
        )

    # -- reading rollouts and attempts -------------------------------------------------------

    async def _has_spans(self, attempt_id: str | None, rollout_id: str) -> bool:
        if attempt_id is None:
            return False
        page = await self.store.query_spans(rollout_id, attempt_id=attempt_id, limit=1)
        return bool(page.items)

    async def _view(self, rollout: FulmenRollout) -> Rollout:
        has_spans = True
        if rollout.status is RolloutStatus.RUNNING:
            attempts = await self.store.list_attempts(rollout.rollout_id)
            latest = attempts[-1].attempt_id if attempts else None
            has_spans = await self._has_spans(latest, rollout.rollout_id)
        return rollout_from_fulmen(rollout, has_spans=has_spans)

    async def query_rollouts(
        self,
        *,
        status: list[str] | None = None,
        rollout_ids: list[str] | None = None,
        status_in: list[str] | None = None,
        rollout_id_in: list[str] | None = None,
        **options: Any,
    ) -> list[Rollout]:
        """Rollouts with any of the 0.x statuses and ids, in enqueue order.

        0.2's ``status`` / ``rollout_ids`` and 0.3's ``status_in`` / ``rollout_id_in`` are the
        same filters; 0.3's sorting, paging and substring filters are refused.
        """
        if options:
            raise NotSupported(
                f"query_rollouts({', '.join(sorted(options))}=...)",
                why="the facade filters by status and id and answers in enqueue order",
                instead="filter, sort or page the returned list in Python",
            )
        status = status_in if status is None else status
        rollout_ids = rollout_id_in if rollout_ids is None else rollout_ids
        query = RolloutQuery(
            statuses=rollout_statuses_to_fulmen(status) if status is not None else None,
            rollout_ids=list(rollout_ids) if rollout_ids is not None else None,
            limit=1000,
        )
        out: list[Rollout] = []
        while True:
            page = await self.store.query_rollouts(query)
            for rollout in page.items:
                view = await self._view(rollout)
                if status is None or view.status in status:
                    out.append(view)
            if page.next_cursor is None:
                return out
            query = query.model_copy(update={"cursor": page.next_cursor})

    async def get_rollout_by_id(self, rollout_id: str) -> Rollout | None:
        """Return the rollout, or ``None``."""
        try:
            return await self._view(await self.store.get_rollout(rollout_id))
        except NotFound:
            return None

    async def query_attempts(self, rollout_id: str) -> list[Attempt]:
        """Every attempt of a rollout, oldest first; ``ValueError`` for an unknown rollout."""
        attempts = await self._attempts(rollout_id)
        return [await self._attempt_view(a) for a in attempts]

    async def get_latest_attempt(self, rollout_id: str) -> Attempt | None:
        """Return the newest attempt, or ``None`` before the first claim."""
        attempts = await self._attempts(rollout_id)
        return await self._attempt_view(attempts[-1]) if attempts else None

    async def _attempts(self, rollout_id: str) -> list[FulmenAttempt]:
        try:
            return await self.store.list_attempts(rollout_id)
        except NotFound as exc:
            raise ValueError(f"rollout {rollout_id} does not exist") from exc

    async def _attempt_view(self, attempt: FulmenAttempt) -> Attempt:
        spans = await self._has_spans(attempt.attempt_id, attempt.rollout_id)
        return attempt_from_fulmen(attempt, has_spans=spans)

    async def wait_for_rollouts(
        self, *, rollout_ids: list[str], timeout: float | None = None
    ) -> list[Rollout]:
        """Wait until the rollouts are final (``None``: as long as it takes); the final ones."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = 60.0 if deadline is None else max(0.0, deadline - time.monotonic())
            done = await self.store.wait_for_rollouts(rollout_ids, timeout=left)
            if len(done) == len(rollout_ids) or deadline is not None:
                return [rollout_from_fulmen(r) for r in done]
            await asyncio.sleep(0)

    # -- changing rollouts and attempts -------------------------------------------------------

    async def update_rollout(
        self,
        rollout_id: str,
        input: Any = UNSET,
        mode: Any = UNSET,
        resources_id: Any = UNSET,
        status: str | Unset = UNSET,
        config: Any = UNSET,
        metadata: dict[str, Any] | Unset | None = UNSET,
    ) -> Rollout:
        """Change a rollout's metadata or cancel it; other changes are refused."""
        for name, value in (
            ("input", input), ("mode", mode), ("resources_id", resources_id), ("config", config)
        ):  # fmt: skip
            if value is not UNSET:
                raise NotSupported(
                    f"update_rollout({name}=...)",
                    why="a fulmen rollout's input, mode, resources and config are fixed once "
                    "enqueued",
                    instead="cancel it (status='cancelled') and enqueue a new one",
                )
        if status is not UNSET and status != "cancelled":
            raise NotSupported(
                f"update_rollout(status={status!r})",
                why="a rollout's status follows its attempts; a caller may only cancel",
                instead="update_attempt(status='succeeded' | 'failed') or status='cancelled'",
            )
        rollout = await self.store.update_rollout(
            rollout_id,
            status=RolloutStatus.CANCELLED if status is not UNSET else UNSET,
            metadata=(metadata or {}) if metadata is not UNSET else UNSET,
        )
        return await self._view(rollout)

    async def update_attempt(
        self,
        rollout_id: str,
        attempt_id: str,
        status: str | Unset = UNSET,
        worker_id: Any = UNSET,
        last_heartbeat_time: Any = UNSET,
        metadata: Any = UNSET,
    ) -> Attempt:
        """Report an attempt's outcome or progress (``attempt_id`` may be ``"latest"``)."""
        attempts = await self._attempts(rollout_id)
        chosen = [a for a in attempts if attempt_id in ("latest", a.attempt_id)]
        if not chosen:
            raise ValueError(f"rollout {rollout_id} has no attempt {attempt_id}")
        attempt = chosen[-1]
        if worker_id is not UNSET or metadata is not UNSET:
            raise NotSupported(
                "update_attempt(worker_id=... / metadata=...)",
                why="a fulmen attempt belongs to the worker that claimed it and has no metadata",
                instead="keep such data in the rollout's metadata (update_rollout)",
            )
        if last_heartbeat_time is not UNSET or status == "running":
            # The store stamps its own clock: clocks of different machines are never compared.
            await self.store.heartbeat(attempt.worker_id, attempt_ids=[attempt.attempt_id])
        if status is not UNSET and status != "running":
            if status not in _REPORTED:
                raise NotSupported(
                    f"update_attempt(status={status!r})",
                    why="timeout and unresponsive are decided by fulmen's watchdog from "
                    "RolloutConfig.timeout_seconds / unresponsive_seconds",
                    instead="report 'succeeded' or 'failed'",
                )
            await self.store.update_attempt(attempt.attempt_id, status=_REPORTED[status])
        return await self._attempt_view(await self.store.get_attempt(attempt.attempt_id))

    # -- spans ----------------------------------------------------------------------------------

    async def add_span(self, span: Span) -> Span:
        """Store a span of an attempt (its ``sequence_id`` is the store's) and heartbeat it."""
        attempt = await self.store.get_attempt(span.attempt_id)
        create = SpanCreate(
            rollout_id=span.rollout_id,
            attempt_id=span.attempt_id,
            trace_id=span.trace_id,
            span_id=span.span_id,
            parent_id=span.parent_id,
            name=span.name,
            attributes=dict(span.attributes),
            status=SpanStatus.model_validate(span.status) if span.status else SpanStatus(),
            start_time=span.start_time if span.start_time is not None else time.time(),
            end_time=span.end_time,
        )
        (stored,) = await self.store.add_spans([create])
        if not attempt.is_terminal:
            await self.store.heartbeat(attempt.worker_id, attempt_ids=[attempt.attempt_id])
        return span_from_fulmen(stored)

    async def query_spans(self, rollout_id: str, attempt_id: str | None = None) -> list[Span]:
        """Return a rollout's spans in sequence order (one attempt, ``"latest"``, or all).

        The gateway's record of each model call is among them, as the span 0.x's tracer made
        of it (``fulmen.compat.agentlightning.spans.call_span``).
        """
        if attempt_id == "latest":
            latest = await self.get_latest_attempt(rollout_id)
            if latest is None:
                return []
            attempt_id = latest.attempt_id
        out: list[Span] = []
        for query in (self.store.query_spans, self.store.query_llm_calls):
            after = 0
            while True:
                page = await query(
                    rollout_id, attempt_id=attempt_id, after_sequence=after, limit=1000
                )
                out += [
                    span_from_fulmen(item) if isinstance(item, FulmenSpan) else call_span(item)
                    for item in page.items
                ]
                if page.next_cursor is None or not page.items:
                    break
                after = page.next_cursor
        # Spans and calls share the rollout's sequence numbers.
        return sorted(out, key=lambda span: span.sequence_id)

    async def get_next_span_sequence_id(self, rollout_id: str, attempt_id: str) -> int:
        """Refused: fulmen's store numbers spans as they arrive."""
        raise NotSupported(
            "get_next_span_sequence_id",
            why="fulmen's store gives every span its sequence number when it is added",
            instead="add_span(...) and read sequence_id from what it returns",
        )

    # -- resources ------------------------------------------------------------------------------

    async def add_resources(self, resources: dict[str, Any]) -> ResourcesUpdate:
        """Store a new immutable snapshot; it becomes the latest (its id: the version)."""
        stored = await self.store.add_resources(snapshot_to_fulmen(resources))
        return snapshot_from_fulmen(stored)

    async def update_resources(self, resources_id: str, resources: dict[str, Any]) -> Any:
        """Refused: a snapshot never changes in fulmen."""
        raise NotSupported(
            "update_resources",
            why="fulmen's resources are immutable versions; rollouts keep the one they got",
            instead="add_resources(...) for a new version, and enqueue with its resources_id",
        )

    async def get_resources_by_id(self, resources_id: str) -> ResourcesUpdate | None:
        """One snapshot by id, or ``None``."""
        try:
            stored = await self.store.get_resources(_version(resources_id) or 0)
        except NotFound:
            return None
        return snapshot_from_fulmen(stored)

    async def get_latest_resources(self) -> ResourcesUpdate | None:
        """Return the newest snapshot, or ``None`` before any was added."""
        stored = await self.store.latest_resources()
        return None if stored is None else snapshot_from_fulmen(stored)


def _version(resources_id: str | None) -> int | None:
    if resources_id is None:
        return None
    if not resources_id.isdigit():
        raise NotSupported(
            f"resources_id={resources_id!r}",
            why="fulmen numbers resources versions; the facade's ids are those numbers",
            instead="use the resources_id that add_resources returned",
        )
    return int(resources_id)
