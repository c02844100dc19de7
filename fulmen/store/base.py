"""The ``Store`` interface every backend implements, in-process or over HTTP.

All methods are async. Writes that a client may retry are idempotent by a caller-chosen id:
``RolloutCreate.rollout_id``, ``claim_id``, ``SpanCreate.(attempt_id, span_id)``,
``LLMCallCreate.call_id``, ``ResourcesCreate.resources_id``, ``Run.run_id``, ``RunMetrics``'s
``(run_id, step, time)`` and ``ModelVersion``'s ``(run_id, version)``. Status changes follow
``fulmen.store.lifecycle``, which every backend shares.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from fulmen.types._unset import UNSET

if TYPE_CHECKING:
    from pydantic import JsonValue

    from fulmen.types import (
        Attempt,
        AttemptStatus,
        Claim,
        LLMCall,
        LLMCallCreate,
        Mode,
        ModelVersion,
        Page,
        PruneReport,
        PruneRequest,
        Resources,
        ResourcesCreate,
        Reward,
        RewardCreate,
        Rollout,
        RolloutCreate,
        RolloutQuery,
        RolloutStatus,
        Run,
        RunMetrics,
        RunStatus,
        Span,
        SpanCreate,
        StoreStats,
        Unset,
        Worker,
    )
    from fulmen.types.releases import Release, ReleaseCreate, ReleaseDecision
    from fulmen.types.sessions import SessionCreate

__all__ = ["Capabilities", "ReconcileReport", "Store"]


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do; tests skip by capability, never by backend name.

    Attributes:
        is_durable: data survives a restart of the process that holds the store.
        is_shared: several processes or machines may use the same store at once.
        is_remote: the store is reached over the network (the HTTP client).
    """

    is_durable: bool
    is_shared: bool
    is_remote: bool = False


@dataclass(frozen=True)
class ReconcileReport:
    """What one watchdog pass changed: attempts it ended and rollouts it re-queued or failed."""

    timed_out: tuple[str, ...] = ()
    lost: tuple[str, ...] = ()
    requeued: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()


@runtime_checkable
class Store(Protocol):
    """Durable state of rollouts, attempts, spans, LLM calls, resources, workers and runs."""

    @property
    def capabilities(self) -> Capabilities:
        """What this backend can do."""
        ...

    async def enqueue(self, rollouts: Sequence[RolloutCreate]) -> list[Rollout]:
        """Queue rollouts in order.

        An existing ``rollout_id`` with the same content is returned as is; with different
        content it raises ``Conflict``. An unknown ``resources_version`` raises ``NotFound``;
        ``None`` takes the latest version (or none if there is none yet).
        """
        ...

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
        ...

    async def heartbeat(
        self,
        worker_id: str,
        *,
        attempt_ids: Sequence[str] = (),
        metadata: dict[str, JsonValue] | None = None,
    ) -> Worker:
        """Record that a worker is alive and still running ``attempt_ids``."""
        ...

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
        ...

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
        ...

    async def add_spans(self, spans: Sequence[SpanCreate]) -> list[Span]:
        """Store spans and give each a sequence number.

        A span already stored is returned as it was, not stored twice.
        """
        ...

    async def add_llm_calls(self, calls: Sequence[LLMCallCreate]) -> list[LLMCall]:
        """Store LLM call records and give tracked ones a sequence number.

        Idempotent by ``call_id``.
        """
        ...

    async def get_rollout(self, rollout_id: str) -> Rollout:
        """One rollout, or ``NotFound``."""
        ...

    async def get_attempt(self, attempt_id: str) -> Attempt:
        """One attempt, or ``NotFound``."""
        ...

    async def list_attempts(self, rollout_id: str) -> list[Attempt]:
        """Return the attempts of a rollout, by number; ``NotFound`` for an unknown rollout."""
        ...

    async def query_rollouts(self, query: RolloutQuery) -> Page[Rollout]:
        """Rollouts matching ``query`` in enqueue order, one page at a time."""
        ...

    async def query_spans(
        self,
        rollout_id: str,
        *,
        attempt_id: str | None = None,
        after_sequence: int = 0,
        limit: int = 1000,
    ) -> Page[Span]:
        """Spans of a rollout with ``sequence > after_sequence``, in sequence order."""
        ...

    async def query_llm_calls(
        self,
        rollout_id: str,
        *,
        attempt_id: str | None = None,
        after_sequence: int = 0,
        limit: int = 1000,
    ) -> Page[LLMCall]:
        """LLM calls of a rollout with ``sequence > after_sequence``, in sequence order."""
        ...

    async def add_reward(self, reward: RewardCreate) -> Reward:
        """Store a reward for a rollout, even long after it finished; idempotent by ``key``.

        The rollout is found by id, by session id, or through the LLM call whose response id is
        given (``NotFound`` when none matches). The reward gets the rollout's next sequence
        number, so it is later than every span and call recorded before it. The same ``key``
        with other content raises ``Conflict``.
        """
        ...

    async def list_rewards(self, rollout_id: str) -> list[Reward]:
        """Return the rewards posted for a rollout, in sequence order; ``NotFound`` if unknown."""
        ...

    async def record_session(self, session: SessionCreate) -> Claim:
        """Store a closed production session as a finished rollout with one more attempt.

        The rollout ``session-<session_id>`` (mode ``production``, ``succeeded``) is created
        the first time and gets one new succeeded attempt ``session.attempt_id`` each time;
        the caller then adds the session's LLM calls to that attempt. The same ``attempt_id``
        again returns what was stored; a rollout of that id that is not a finished production
        session raises ``Conflict``.
        """
        ...

    async def prune(self, request: PruneRequest) -> PruneReport:
        """Delete finished rollouts that ended before a time, with all their records.

        Queued and running rollouts are never touched. Attempts, spans, LLM calls and rewards
        of each deleted rollout go with it; ``keep_rewarded`` keeps rollouts that have a reward
        and ``dry_run`` only counts.
        """
        ...

    async def add_resources(self, resources: ResourcesCreate) -> Resources:
        """Store a new immutable snapshot as the next version (idempotent by ``resources_id``)."""
        ...

    async def get_resources(self, version: int) -> Resources:
        """One version, or ``NotFound``."""
        ...

    async def latest_resources(self) -> Resources | None:
        """Return the highest version, or ``None`` when no resources were added."""
        ...

    async def start_run(self, run: Run) -> Run:
        """Record a training run as ``running``, or resume the stored run with its id.

        A resumed run keeps its ``started_at``; its name, config and host are replaced and its
        ``ended_at`` cleared. ``updated_at`` is the store's clock.
        """
        ...

    async def update_run(
        self,
        run_id: str,
        *,
        status: RunStatus | Unset = UNSET,
        ended_at: float | Unset | None = UNSET,
    ) -> Run:
        """Change a run's status or end time; ``NotFound`` for an unknown run.

        Moving to a final status without an ``ended_at`` stamps the store's clock; moving back
        to ``running`` clears it.
        """
        ...

    async def add_run_metrics(self, metrics: Sequence[RunMetrics]) -> None:
        """Store metrics records, all or none; idempotent by ``(run_id, step, time)``.

        A record whose run does not exist raises ``NotFound``; a stored key with other values
        raises ``Conflict``.
        """
        ...

    async def list_runs(self, *, limit: int = 100, offset: int = 0) -> Page[Run]:
        """List runs, latest started first; ``next_cursor`` is the next page's offset."""
        ...

    async def get_run(self, run_id: str) -> Run:
        """One run, or ``NotFound``."""
        ...

    async def query_run_metrics(
        self, run_id: str, *, after_step: int | None = None, limit: int = 1000
    ) -> Page[RunMetrics]:
        """Return a run's metrics with ``step > after_step``, by step then time.

        A page never splits a step (it may exceed ``limit`` to finish one); ``next_cursor`` is
        the last step of the page when more follow. A live run's last step may still get
        records (its validation comes after its training metrics): a reader that follows it
        asks again from the step before. ``NotFound`` for an unknown run.
        """
        ...

    async def add_model_version(self, version: ModelVersion) -> ModelVersion:
        """Record a published model version; idempotent by ``(run_id, version)``.

        The same content again returns the stored version; other content raises ``Conflict``.
        An unknown run raises ``NotFound``. ``created_at`` is the store's clock.
        """
        ...

    async def list_model_versions(self, run_id: str | None = None) -> list[ModelVersion]:
        """Model versions of one run (or of every run), by run id then version."""
        ...

    async def put_release(self, release: ReleaseCreate) -> Release:
        """Store a new release in the ``canary`` state; idempotent by name.

        The same definition again returns the stored release (whatever its state); another
        definition under a stored name raises ``Conflict``. See ``fulmen.types.releases``.
        """
        ...

    async def get_release(self, name: str) -> Release:
        """Return the release of that name; ``NotFound`` if there is none."""
        ...

    async def list_releases(self) -> list[Release]:
        """Return every release, latest created first."""
        ...

    async def decide_release(self, name: str, decision: ReleaseDecision) -> Release:
        """Append ``decision`` to the release's events and move its state as it says.

        ``promoted`` and ``rolled_back`` change the state (``Conflict`` where the state does
        not allow it, or when ``expected_revision`` is stale); ``window`` records the gate's
        figures. A decision whose ``event_id`` the release holds returns it unchanged.
        """
        ...

    async def wait_for_rollouts(
        self, rollout_ids: Sequence[str], *, timeout: float
    ) -> list[Rollout]:
        """Wait, without busy polling, for rollouts to become final.

        Waits until every listed rollout is final or ``timeout`` seconds pass; returns the ones
        that are final, in the order asked.
        """
        ...

    async def list_workers(self) -> list[Worker]:
        """Every worker that sent a heartbeat."""
        ...

    async def stats(self) -> StoreStats:
        """Count rollouts, attempts, spans, calls, resources and workers."""
        ...

    async def reconcile(self) -> ReconcileReport:
        """Run one watchdog pass.

        Ends attempts past their timeout or heartbeat deadline and retries or fails their
        rollouts. Safe to run from several processes at once.
        """
        ...

    async def aclose(self) -> None:
        """Release connections and background tasks; the store may not be used afterwards."""
        ...
