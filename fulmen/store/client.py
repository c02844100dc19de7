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
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import httpx
from pydantic import BaseModel

from fulmen.store.base import Capabilities, ReconcileReport, Store
from fulmen.store.client_ops import given_fields
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


class StoreClient(RunsOverHttp, Store):
    """A ``Store`` reached over HTTP; create it with ``await StoreClient.connect(url)``.

    The server runs the watchdog; the client runs none. Use one client per event loop. The
    run and model-version methods come from ``RunsOverHttp``.
    """

    def __init__(self, connection: StoreConnection, info: ServiceInfo) -> None:
        super().__init__()
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

    # -- the queue ------------------------------------------------------------------------------

    async def _enqueue(self, rollouts: list[RolloutCreate]) -> list[Rollout]:
        # Rollouts without an id get one here, so a retry queues them once.
        keyed = [
            r if r.rollout_id is not None else r.model_copy(update={"rollout_id": new_id("ro")})
            for r in rollouts
        ]
        return await self._call("enqueue", EnqueueRequest.model_construct(rollouts=keyed))

    async def _claim(
        self, worker_id: str, limit: int, modes: list[Mode] | None, claim_id: str | None
    ) -> list[Claim]:
        # A missing claim id is generated, so a retry takes no more rollouts.
        request = ClaimRequest.model_construct(
            worker_id=worker_id, limit=limit, modes=modes, claim_id=claim_id or new_id("claim")
        )
        return await self._call("claim", request)

    async def _heartbeat(
        self, worker_id: str, attempt_ids: list[str], metadata: dict[str, JsonValue] | None
    ) -> Worker:
        request = HeartbeatRequest.model_construct(
            worker_id=worker_id, attempt_ids=attempt_ids, metadata=metadata
        )
        return await self._call("heartbeat", request)

    async def _update_attempt(
        self, attempt_id: str, status: AttemptStatus | Unset, error: str | Unset | None
    ) -> Attempt:
        # If the first report was applied, repeating it would record a "late" report.
        given = given_fields(status=status, error=error)
        recover = _if_applied(lambda: self._get_attempt(attempt_id), given)
        body = AttemptUpdate.model_construct(**given)
        path = {"attempt_id": attempt_id}
        return await self._call("update_attempt", body, path=path, recover=recover, partial=True)

    async def _update_rollout(
        self,
        rollout_id: str,
        status: RolloutStatus | Unset,
        metadata: dict[str, JsonValue] | Unset,
    ) -> Rollout:
        # A cancel that reached the server before the connection broke must not be sent
        # again: a second cancel of a final rollout is an InvalidTransition.
        given = given_fields(status=status, metadata=metadata)
        recover = _if_applied(lambda: self._get_rollout(rollout_id), given)
        body = RolloutUpdate.model_construct(**given)
        path = {"rollout_id": rollout_id}
        return await self._call("update_rollout", body, path=path, recover=recover, partial=True)

    async def _record_session(self, session: SessionCreate) -> Claim:
        # The caller's attempt id makes a retry store the session once.
        return await self._call("record_session", session)

    async def _get_rollout(self, rollout_id: str) -> Rollout:
        return await self._call("get_rollout", path={"rollout_id": rollout_id})

    async def _get_attempt(self, attempt_id: str) -> Attempt:
        return await self._call("get_attempt", path={"attempt_id": attempt_id})

    async def _list_attempts(self, rollout_id: str) -> list[Attempt]:
        return await self._call("list_attempts", path={"rollout_id": rollout_id})

    async def _query_rollouts(self, query: RolloutQuery) -> Page[Rollout]:
        return await self._call("query_rollouts", query)

    async def _list_workers(self) -> list[Worker]:
        return await self._call("list_workers")

    async def _wait_for_rollouts(self, rollout_ids: list[str], timeout: float) -> list[Rollout]:
        # Long polls of at most the server's cap, repeated until the timeout is spent.
        deadline = time.monotonic() + timeout
        while True:
            wait = min(max(deadline - time.monotonic(), 0.0), self._info.max_wait_s)
            request = WaitRequest.model_construct(rollout_ids=rollout_ids, timeout=wait)
            final: list[Rollout] = await self._call(
                "wait_for_rollouts", request, extra_timeout=wait
            )
            if len(final) == len(rollout_ids) or time.monotonic() >= deadline:
                return final

    async def _reconcile(self) -> ReconcileReport:
        # Asks the server to run one watchdog pass now.
        result: ReconcileResult = await self._call("reconcile")
        return ReconcileReport(
            timed_out=tuple(result.timed_out),
            lost=tuple(result.lost),
            requeued=tuple(result.requeued),
            failed=tuple(result.failed),
        )

    async def _add_resources(self, resources: ResourcesCreate) -> Resources:
        # A missing resources id is generated, so a retry stores one version.
        if resources.resources_id is None:
            resources = resources.model_copy(update={"resources_id": new_id("res")})
        return await self._call("add_resources", resources)

    async def _get_resources(self, version: int) -> Resources:
        return await self._call("get_resources", path={"version": version})

    async def _latest_resources(self) -> Resources | None:
        return await self._call("latest_resources")

    # -- the record log (idempotent by the records' own ids, so retried) ------------------------

    async def _add_spans(self, spans: list[SpanCreate]) -> list[Span]:
        return await self._call("add_spans", SpansRequest.model_construct(spans=spans))

    async def _add_llm_calls(self, calls: list[LLMCallCreate]) -> list[LLMCall]:
        return await self._call("add_llm_calls", LLMCallsRequest.model_construct(calls=calls))

    async def _query_spans(
        self, rollout_id: str, attempt_id: str | None, after_sequence: int, limit: int
    ) -> Page[Span]:
        params = _record_params(attempt_id, after_sequence, limit)
        return await self._call("query_spans", path={"rollout_id": rollout_id}, params=params)

    async def _query_llm_calls(
        self, rollout_id: str, attempt_id: str | None, after_sequence: int, limit: int
    ) -> Page[LLMCall]:
        params = _record_params(attempt_id, after_sequence, limit)
        return await self._call("query_llm_calls", path={"rollout_id": rollout_id}, params=params)

    async def _add_reward(self, reward: RewardCreate) -> Reward:
        # A missing key is generated, so a retry stores the reward once.
        if reward.key is None:
            reward = reward.model_copy(update={"key": new_id("rw")})
        return await self._call("add_reward", reward)

    async def _list_rewards(self, rollout_id: str) -> list[Reward]:
        return await self._call("list_rewards", path={"rollout_id": rollout_id})

    # -- the whole store ------------------------------------------------------------------------

    async def _prune(self, request: PruneRequest) -> PruneReport:
        # A retried prune deletes nothing twice (its counts are its own).
        return await self._call("prune", request)

    async def _stats(self) -> StoreStats:
        return await self._call("stats")

    async def _aclose(self) -> None:
        await self._connection.aclose()


def _record_params(attempt_id: str | None, after_sequence: int, limit: int) -> dict[str, Any]:
    params: dict[str, Any] = {"after_sequence": after_sequence, "limit": limit}
    if attempt_id is not None:
        params["attempt_id"] = attempt_id
    return params


def _if_applied(
    read: Callable[[], Awaitable[BaseModel]], given: dict[str, Any]
) -> Callable[[], Awaitable[bytes | None]]:
    """Return a check, run before a status change is sent again, of whether it was applied.

    When the stored record already holds the status and every other field given, the first
    request reached the server: its record is the answer, and nothing is sent again. A change
    without a status is a plain set, which is the same when repeated.
    """

    async def recover() -> bytes | None:
        if "status" not in given:
            return None
        current = await read()
        if all(getattr(current, name) == value for name, value in given.items()):
            return current.model_dump_json().encode()
        return None

    return recover
