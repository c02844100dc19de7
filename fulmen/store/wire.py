"""The request and response bodies of the store service that are not plain data-model types.

Store methods take keyword arguments; over HTTP those arguments travel as these small pydantic
models (JSON bodies or query strings). The server validates them, the client builds them, and
the OpenAPI spec is generated from their JSON schemas, so the three never drift apart.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from fulmen.store.runs import MAX_METRICS_LIMIT, MAX_RUNS_LIMIT
from fulmen.types import (
    AttemptStatus,
    LLMCallCreate,
    Mode,
    RolloutCreate,
    RolloutStatus,
    RunMetrics,
    RunStatus,
    SpanCreate,
)
from fulmen.types.limits import FiniteFloat, Id, Int64, JsonData, Text, WorkerId

__all__ = [
    "AttemptUpdate",
    "ClaimRequest",
    "EnqueueRequest",
    "ErrorBody",
    "HealthStatus",
    "HeartbeatRequest",
    "LLMCallsRequest",
    "ModelVersionQuery",
    "ReconcileResult",
    "RecordQuery",
    "RolloutUpdate",
    "RunListQuery",
    "RunMetricsQuery",
    "RunMetricsRequest",
    "RunUpdate",
    "ServiceInfo",
    "SpansRequest",
    "WaitRequest",
]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")

    def arguments(self) -> dict[str, Any]:
        """Return the fields as the keyword arguments of the ``Store`` method they carry."""
        return {name: getattr(self, name) for name in type(self).model_fields}


class _Partial(_Body):
    """A partial update: a field left out, or ``null``, is left as it is.

    Except the fields in ``clearable``, which a ``null`` that was sent clears.
    """

    clearable: ClassVar[frozenset[str]] = frozenset()

    def arguments(self) -> dict[str, Any]:
        """Return the fields given, as keyword arguments (a field left out stays ``UNSET``)."""
        given = self.model_fields_set
        return {
            name: value
            for name, value in super().arguments().items()
            if value is not None or (name in self.clearable and name in given)
        }


class EnqueueRequest(_Body):
    """Rollouts to queue, in order (``Store.enqueue``)."""

    rollouts: list[RolloutCreate]


class ClaimRequest(_Body):
    """Arguments of ``Store.claim``; repeat a ``claim_id`` to get the same claims back."""

    worker_id: WorkerId
    limit: int = Field(default=1, ge=1, le=10_000)
    modes: list[Mode] | None = None
    claim_id: Id | None = None


class HeartbeatRequest(_Body):
    """Arguments of ``Store.heartbeat``; ``metadata`` ``null`` keeps the previous metadata."""

    worker_id: WorkerId
    attempt_ids: list[Id] = Field(default_factory=list)
    metadata: dict[str, JsonData] | None = None


class AttemptUpdate(_Partial):
    """A partial update of an attempt; a field left out of the body is left as it is."""

    clearable: ClassVar[frozenset[str]] = frozenset({"error"})

    status: AttemptStatus | None = None
    error: Text | None = None


class RolloutUpdate(_Partial):
    """A partial update of a rollout; a field left out of the body is left as it is."""

    status: RolloutStatus | None = None
    metadata: dict[str, JsonData] | None = None


class SpansRequest(_Body):
    """Spans to store (``Store.add_spans``); idempotent by ``(attempt_id, span_id)``."""

    spans: list[SpanCreate]


class LLMCallsRequest(_Body):
    """LLM call records to store (``Store.add_llm_calls``); idempotent by ``call_id``."""

    calls: list[LLMCallCreate]


class RecordQuery(_Body):
    """Query-string arguments of ``Store.query_spans`` and ``Store.query_llm_calls``."""

    attempt_id: Id | None = None
    after_sequence: Int64 = Field(default=0, ge=0)
    limit: int = Field(default=1000, ge=1, le=10_000)


class RunUpdate(_Partial):
    """A partial update of a run (``Store.update_run``); a field left out is left as it is."""

    clearable: ClassVar[frozenset[str]] = frozenset({"ended_at"})

    status: RunStatus | None = None
    ended_at: FiniteFloat | None = None


class RunMetricsRequest(_Body):
    """Metrics records to store (``Store.add_run_metrics``); idempotent by their key."""

    metrics: list[RunMetrics] = Field(max_length=10_000)


class RunListQuery(_Body):
    """Query-string arguments of ``Store.list_runs``."""

    limit: int = Field(default=100, ge=1, le=MAX_RUNS_LIMIT)
    offset: Int64 = Field(default=0, ge=0)


class RunMetricsQuery(_Body):
    """Query-string arguments of ``Store.query_run_metrics``."""

    after_step: Int64 | None = None
    limit: int = Field(default=1000, ge=1, le=MAX_METRICS_LIMIT)


class ModelVersionQuery(_Body):
    """Query-string arguments of ``Store.list_model_versions``."""

    run_id: Id | None = None


class WaitRequest(_Body):
    """Arguments of ``Store.wait_for_rollouts``; the server caps ``timeout`` per request."""

    rollout_ids: list[Id]
    timeout: FiniteFloat = Field(ge=0)


class ReconcileResult(_Body):
    """What one watchdog pass changed (``Store.reconcile``)."""

    timed_out: list[str] = Field(default_factory=list)
    lost: list[str] = Field(default_factory=list)
    requeued: list[str] = Field(default_factory=list)
    failed: list[str] = Field(default_factory=list)


class ServiceInfo(_Body):
    """What the service says about itself (``GET /v1/info``, readable without a token).

    Attributes:
        version: the fulmen version of the server.
        is_durable: whether the backend behind the service keeps data across restarts.
        is_shared: always true: every client of the service sees the same store.
        max_body_bytes: the largest request body the server accepts.
        max_wait_s: the longest a single ``wait_for_rollouts`` request is held open.
        auth_required: whether requests need a bearer token.
    """

    version: str
    is_durable: bool
    is_shared: bool
    max_body_bytes: int
    max_wait_s: float
    auth_required: bool


class HealthStatus(_Body):
    """``GET /health``, readable without a token: the service answers (probes call it).

    It does not query the backend, so a probe every few seconds costs the database nothing.
    """

    status: Literal["ok"] = "ok"


class ErrorBody(_Body):
    """Every error response: a message, a stable code, optional detail and the request's id.

    ``request_id`` names the server log line that holds what a 5xx body leaves out.
    """

    error: str
    code: str
    detail: JsonValue = None
    request_id: str
