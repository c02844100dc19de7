"""StoreClient: the ``Store`` interface over HTTP, talking to ``fulmen store serve``.

Code written against ``Store`` runs unchanged on another machine: every method has the same
arguments, return types and exceptions as the in-process backends (error bodies are mapped back
to ``fulmen.errors`` classes by their ``code``). Network errors and 5xx answers are retried with
capped, jittered exponential backoff. Retrying never duplicates a write: before sending, the
client fills the idempotency keys the caller left empty (``RolloutCreate.rollout_id``,
``claim_id``, ``ResourcesCreate.resources_id``, ``RewardCreate.key``; spans and LLM calls carry
their own ids), and a status report that may already have been applied is checked before it
is sent again.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import httpx

from fulmen.store.arguments import check_arguments
from fulmen.store.base import Capabilities, ReconcileReport
from fulmen.store.client_runs import RunsOverHttp
from fulmen.store.clock import new_id
from fulmen.store.connection import StoreConnection
from fulmen.store.wire import (
    AttemptUpdate,
    ClaimRequest,
    EnqueueRequest,
    HeartbeatRequest,
    LLMCallsRequest,
    ReconcileResult,
    RolloutUpdate,
    ServiceInfo,
    SpansRequest,
    WaitRequest,
)
from fulmen.types import (
    UNSET,
    Attempt,
    AttemptStatus,
    Claim,
    LLMCall,
    LLMCallCreate,
    Mode,
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
    Span,
    SpanCreate,
    StoreStats,
    Unset,
    Worker,
)

if TYPE_CHECKING:
    from pydantic import JsonValue

    from fulmen.types.sessions import SessionCreate

__all__ = ["StoreClient"]


class StoreClient(RunsOverHttp):
    """A ``Store`` reached over HTTP; create it with ``await StoreClient.connect(url)``.

    The server runs the watchdog; the client runs none. Use one client per event loop. The
    run and model-version methods come from ``RunsOverHttp``.
    """

    def __init__(self, connection: StoreConnection, info: ServiceInfo) -> None:
        self._connection = connection
        self._info = info
        self._send = connection.send

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        token: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: float = 30.0,
        retries: int = 3,
        watchdog_interval: float | None = None,
    ) -> StoreClient:
        """Connect to the store service at ``url`` and read what it can do.

        Args:
            url: the service's base URL, e.g. ``http://127.0.0.1:4747``.
            token: bearer token, when the server requires one.
            transport: an httpx transport to use instead of the network (e.g.
                ``httpx.ASGITransport(app)`` for in-process tests).
            timeout: seconds for connecting and for each response (long polls add their wait).
            retries: how many times a request that hit a network error or a 5xx is repeated.
            watchdog_interval: accepted for symmetry with local backends and ignored: the
                server process runs the watchdog.
        """
        del watchdog_interval
        connection = StoreConnection.open(
            url, token=token, transport=transport, timeout=timeout, retries=retries
        )
        try:
            info = ServiceInfo.model_validate_json(await connection.send("GET", "/v1/info"))
        except BaseException:
            await connection.aclose()
            raise
        connection.max_body_bytes = info.max_body_bytes
        return cls(connection, info)

    @property
    def capabilities(self) -> Capabilities:
        """The backend's durability and sharing as the server reports them; always remote."""
        return Capabilities(
            is_durable=self._info.is_durable, is_shared=self._info.is_shared, is_remote=True
        )

    # -- rollouts -------------------------------------------------------------------------------

    async def enqueue(self, rollouts: Sequence[RolloutCreate]) -> list[Rollout]:
        """See ``Store.enqueue``; rollouts without an id get one here, so retries are safe."""
        keyed = [
            r if r.rollout_id is not None else r.model_copy(update={"rollout_id": new_id("ro")})
            for r in rollouts
        ]
        request = EnqueueRequest.model_construct(rollouts=keyed)
        return await self._call("enqueue", request)

    async def claim(
        self,
        worker_id: str,
        *,
        limit: int = 1,
        modes: Sequence[Mode] | None = None,
        claim_id: str | None = None,
    ) -> list[Claim]:
        """See ``Store.claim``; a missing ``claim_id`` is generated so retries take no more."""
        request = ClaimRequest.model_construct(
            worker_id=worker_id,
            limit=limit,
            modes=list(modes) if modes is not None else None,
            claim_id=claim_id or new_id("claim"),
        )
        return await self._call("claim", request)

    async def update_rollout(
        self,
        rollout_id: str,
        *,
        status: RolloutStatus | Unset = UNSET,
        metadata: dict[str, JsonValue] | Unset = UNSET,
    ) -> Rollout:
        """See ``Store.update_rollout``."""
        fields: dict[str, Any] = {}
        if status is not UNSET:
            fields["status"] = status
        if metadata is not UNSET:
            # JSON serialization would turn a NaN into null: refuse it here, as the server would.
            check_arguments(metadata=metadata)
            fields["metadata"] = metadata

        async def recover() -> bytes | None:
            # A cancel that reached the server before the connection broke must not be sent
            # again: a second cancel of a final rollout is an InvalidTransition.
            current = await self.get_rollout(rollout_id)
            if (
                status is not UNSET
                and current.status is status
                and (metadata is UNSET or current.metadata == metadata)
            ):
                return current.model_dump_json().encode()
            return None

        body = RolloutUpdate.model_construct(**fields)
        path = {"rollout_id": rollout_id}
        return await self._call("update_rollout", body, path=path, recover=recover, partial=True)

    async def get_rollout(self, rollout_id: str) -> Rollout:
        """See ``Store.get_rollout``."""
        return await self._call("get_rollout", path={"rollout_id": rollout_id})

    async def list_attempts(self, rollout_id: str) -> list[Attempt]:
        """See ``Store.list_attempts``."""
        return await self._call("list_attempts", path={"rollout_id": rollout_id})

    async def query_rollouts(self, query: RolloutQuery) -> Page[Rollout]:
        """See ``Store.query_rollouts``."""
        return await self._call("query_rollouts", query)

    async def wait_for_rollouts(
        self, rollout_ids: Sequence[str], *, timeout: float
    ) -> list[Rollout]:
        """See ``Store.wait_for_rollouts``: long polls of at most the server's cap, repeated."""
        ids = list(rollout_ids)
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            wait = min(max(deadline - time.monotonic(), 0.0), self._info.max_wait_s)
            request = WaitRequest.model_construct(rollout_ids=ids, timeout=wait)
            final: list[Rollout] = await self._call(
                "wait_for_rollouts", request, extra_timeout=wait
            )
            if len(final) == len(ids) or time.monotonic() >= deadline:
                return final

    # -- attempts and workers -------------------------------------------------------------------

    async def get_attempt(self, attempt_id: str) -> Attempt:
        """See ``Store.get_attempt``."""
        return await self._call("get_attempt", path={"attempt_id": attempt_id})

    async def update_attempt(
        self,
        attempt_id: str,
        *,
        status: AttemptStatus | Unset = UNSET,
        error: str | Unset | None = UNSET,
    ) -> Attempt:
        """See ``Store.update_attempt``."""
        fields: dict[str, Any] = {}
        if status is not UNSET:
            fields["status"] = status
        if error is not UNSET:
            fields["error"] = error

        async def recover() -> bytes | None:
            # If the first report was applied, repeating it would record a "late" report.
            current = await self.get_attempt(attempt_id)
            if (
                status is not UNSET
                and current.status is status
                and (error is UNSET or current.error == error)
            ):
                return current.model_dump_json().encode()
            return None

        body = AttemptUpdate.model_construct(**fields)
        path = {"attempt_id": attempt_id}
        return await self._call("update_attempt", body, path=path, recover=recover, partial=True)

    async def heartbeat(
        self,
        worker_id: str,
        *,
        attempt_ids: Sequence[str] = (),
        metadata: dict[str, JsonValue] | None = None,
    ) -> Worker:
        """See ``Store.heartbeat``."""
        check_arguments(metadata=metadata)  # a NaN would be sent as null
        request = HeartbeatRequest.model_construct(
            worker_id=worker_id, attempt_ids=list(attempt_ids), metadata=metadata
        )
        return await self._call("heartbeat", request)

    async def list_workers(self) -> list[Worker]:
        """See ``Store.list_workers``."""
        return await self._call("list_workers")

    # -- spans and LLM calls --------------------------------------------------------------------

    async def add_spans(self, spans: Sequence[SpanCreate]) -> list[Span]:
        """See ``Store.add_spans``; idempotent by ``(attempt_id, span_id)``, so retried."""
        request = SpansRequest.model_construct(spans=list(spans))
        return await self._call("add_spans", request)

    async def add_llm_calls(self, calls: Sequence[LLMCallCreate]) -> list[LLMCall]:
        """See ``Store.add_llm_calls``; idempotent by ``call_id``, so retried."""
        request = LLMCallsRequest.model_construct(calls=list(calls))
        return await self._call("add_llm_calls", request)

    async def query_spans(
        self,
        rollout_id: str,
        *,
        attempt_id: str | None = None,
        after_sequence: int = 0,
        limit: int = 1000,
    ) -> Page[Span]:
        """See ``Store.query_spans``."""
        params = _record_params(attempt_id, after_sequence, limit)
        return await self._call("query_spans", path={"rollout_id": rollout_id}, params=params)

    async def query_llm_calls(
        self,
        rollout_id: str,
        *,
        attempt_id: str | None = None,
        after_sequence: int = 0,
        limit: int = 1000,
    ) -> Page[LLMCall]:
        """See ``Store.query_llm_calls``."""
        params = _record_params(attempt_id, after_sequence, limit)
        return await self._call("query_llm_calls", path={"rollout_id": rollout_id}, params=params)

    # -- resources ------------------------------------------------------------------------------

    async def add_resources(self, resources: ResourcesCreate) -> Resources:
        """See ``Store.add_resources``; a missing ``resources_id`` is generated for safe retries."""
        if resources.resources_id is None:
            resources = resources.model_copy(update={"resources_id": new_id("res")})
        return await self._call("add_resources", resources)

    async def get_resources(self, version: int) -> Resources:
        """See ``Store.get_resources``."""
        return await self._call("get_resources", path={"version": version})

    async def latest_resources(self) -> Resources | None:
        """See ``Store.latest_resources``."""
        return await self._call("latest_resources")

    # -- rewards and retention ------------------------------------------------------------------

    async def add_reward(self, reward: RewardCreate) -> Reward:
        """See ``Store.add_reward``; a missing ``key`` is generated so a retry stores once."""
        if reward.key is None:
            reward = reward.model_copy(update={"key": new_id("rw")})
        return await self._call("add_reward", reward)

    async def list_rewards(self, rollout_id: str) -> list[Reward]:
        """See ``Store.list_rewards``."""
        return await self._call("list_rewards", path={"rollout_id": rollout_id})

    async def record_session(self, session: SessionCreate) -> Claim:
        """See ``Store.record_session``; the caller's ``attempt_id`` makes a retry store once."""
        return await self._call("record_session", session)

    async def prune(self, request: PruneRequest) -> PruneReport:
        """See ``Store.prune``; a retried prune deletes nothing twice (its counts are its own)."""
        return await self._call("prune", request)

    # -- watchdog, statistics, lifecycle --------------------------------------------------------

    async def stats(self) -> StoreStats:
        """See ``Store.stats``."""
        return await self._call("stats")

    async def reconcile(self) -> ReconcileReport:
        """See ``Store.reconcile``: asks the server to run one watchdog pass now."""
        result: ReconcileResult = await self._call("reconcile")
        return ReconcileReport(
            timed_out=tuple(result.timed_out),
            lost=tuple(result.lost),
            requeued=tuple(result.requeued),
            failed=tuple(result.failed),
        )

    async def aclose(self) -> None:
        """Close the connection pool; the client may not be used afterwards."""
        await self._connection.aclose()


def _record_params(attempt_id: str | None, after_sequence: int, limit: int) -> dict[str, Any]:
    params: dict[str, Any] = {"after_sequence": after_sequence, "limit": limit}
    if attempt_id is not None:
        params["attempt_id"] = attempt_id
    return params
