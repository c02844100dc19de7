"""The operation table of the store service: one row per ``Store`` method.

Each ``Operation`` names its HTTP method and path, the models of its body, query string and
response. A route calls the ``Store`` method of its name with what the request carries
(``Operation.answer``); the five that do more (the service's own info and health, the capped
long poll, the group-committed span and call writes, the watchdog's report) name a handler.
The server (``fulmen.store.server``) mounts the table on Starlette, the OpenAPI spec
(``fulmen.store.openapi``) is generated from it and the client (``fulmen.store.client_ops``)
sends requests by its rows, so routes, documentation and client cannot disagree. Input is
validated with pydantic; a ``FulmenError`` propagates and the server turns it into JSON.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from fulmen.errors import InvalidRequest
from fulmen.store.base import Store
from fulmen.store.wire import (
    AttemptUpdate,
    ClaimRequest,
    EnqueueRequest,
    HealthStatus,
    HeartbeatRequest,
    LLMCallsRequest,
    ModelVersionQuery,
    ReconcileResult,
    RecordQuery,
    RolloutUpdate,
    RunListQuery,
    RunMetricsQuery,
    RunMetricsRequest,
    RunUpdate,
    ServiceInfo,
    SpansRequest,
    WaitRequest,
)
from fulmen.types import (
    Attempt,
    Claim,
    LLMCall,
    LLMCallCreate,
    ModelVersion,
    Page,
    PruneReport,
    PruneRequest,
    Resources,
    ResourcesCreate,
    Reward,
    RewardCreate,
    Rollout,
    RolloutQuery,
    Run,
    RunMetrics,
    Span,
    SpanCreate,
    StoreStats,
    Worker,
)
from fulmen.types.limits import INT32_MAX, Id
from fulmen.types.releases import Release, ReleaseCreate, ReleaseDecision
from fulmen.types.sessions import SessionCreate

__all__ = ["OPERATIONS", "PATH_PARAMETERS", "Call", "MalformedBody", "Operation", "parse_body"]

_M = TypeVar("_M", bound=BaseModel)


class MalformedBody(InvalidRequest):
    """The body is not JSON at all (HTTP 400); the code stays ``invalid_request``."""

    http_status = 400


@dataclass(frozen=True)
class Call:
    """One request as a handler sees it: the store, decoded path parameters, query, body.

    ``add_spans``/``add_llm_calls`` write through the server's group commit
    (``fulmen.store.coalescer``) instead of calling the store directly.
    """

    store: Store
    info: ServiceInfo
    add_spans: Callable[[Sequence[SpanCreate]], Awaitable[list[Span]]]
    add_llm_calls: Callable[[Sequence[LLMCallCreate]], Awaitable[list[LLMCall]]]
    path: Mapping[str, str]
    query: Mapping[str, str]
    body: bytes


@dataclass(frozen=True)
class Operation:
    """One route: ``name`` is the ``Store`` method it exposes (and the OpenAPI operationId).

    The route calls that method with its path parameters, its query's fields and its body's
    fields as keyword arguments (``body_as``: the whole body as that one argument instead);
    ``handler`` replaces that for the few routes that do more than call the method. ``encode``
    writes the result as ``response`` says (the type the OpenAPI spec documents and the
    client parses).
    """

    name: str
    method: str
    path: str
    summary: str
    response: Any
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    body_as: str | None = None
    handler: Callable[[Call], Awaitable[Any]] | None = None
    is_public: bool = False  # readable without a token
    _adapter: TypeAdapter[Any] = field(init=False, repr=False, compare=False)
    _path_names: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        response = self.response if self.response is not None else type(None)
        object.__setattr__(self, "_adapter", TypeAdapter(response))
        object.__setattr__(self, "_path_names", tuple(_PATH_NAME.findall(self.path)))

    async def answer(self, call: Call) -> Any:
        """Run the operation for one request and return its result (not yet encoded)."""
        if self.handler is not None:
            return await self.handler(call)
        arguments = {name: _path_parameter(call, name) for name in self._path_names}
        if self.query is not None:
            arguments.update(_arguments(_parse_query(self.query, call.query)))
        if self.body is not None:
            body = parse_body(self.body, call.body)
            arguments.update({self.body_as: body} if self.body_as else _arguments(body))
        return await getattr(call.store, self.name)(**arguments)

    def encode(self, result: Any) -> bytes:
        """Return ``result`` as the JSON body of this operation's answer."""
        return self._adapter.dump_json(result)


_PATH_NAME = re.compile(r"{(\w+)}")


def _arguments(model: BaseModel) -> dict[str, Any]:
    arguments = getattr(model, "arguments", None)
    return arguments() if arguments is not None else dict(model)


def _validation_error(exc: ValidationError, where: str) -> InvalidRequest:
    errors = exc.errors(include_url=False, include_context=False, include_input=False)
    if any(e["type"] == "json_invalid" for e in errors):
        return MalformedBody(f"malformed JSON in {where}: {errors[0]['msg']}")
    parts = [f"{'.'.join(str(p) for p in e['loc']) or where}: {e['msg']}" for e in errors[:5]]
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    detail = [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in errors]
    return InvalidRequest(f"invalid {where}: {'; '.join(parts)}{more}", detail=detail)


def parse_body(model: type[_M], body: bytes) -> _M:
    """Validate a JSON body, raising ``InvalidRequest`` that names the bad field."""
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        raise _validation_error(exc, "request body") from None


PATH_PARAMETERS: dict[str, TypeAdapter[Any]] = {
    "rollout_id": TypeAdapter(Id),
    "attempt_id": TypeAdapter(Id),
    "run_id": TypeAdapter(Id),
    "name": TypeAdapter(Id),
    "version": TypeAdapter(Annotated[int, Field(ge=1, le=INT32_MAX)]),
}
"""The type of every path parameter; the OpenAPI spec takes their schemas from here."""

_ASCII_INTEGER = re.compile(r"[0-9]{1,19}")


def _path_parameter(call: Call, name: str) -> Any:
    """Validate one path parameter, raising ``InvalidRequest`` that names it and the rule."""
    raw = call.path[name]
    # int() would accept any Unicode digit ("²", "٣") and surrounding spaces.
    if name == "version" and not _ASCII_INTEGER.fullmatch(raw):
        msg = f"must be an integer from 1 to {INT32_MAX} in ASCII digits, got {raw!r}"
        detail = [{"loc": ["path", name], "msg": msg, "type": "int_parsing"}]
        raise InvalidRequest(f"invalid path parameter {name}: {msg}", detail=detail)
    try:
        return PATH_PARAMETERS[name].validate_python(int(raw) if name == "version" else raw)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_context=False, include_input=False)
        msg = errors[0]["msg"]
        detail = [{"loc": ["path", name], "msg": e["msg"], "type": e["type"]} for e in errors]
        raise InvalidRequest(f"invalid path parameter {name}: {msg}", detail=detail) from None


def _parse_query(model: type[_M], query: Mapping[str, str]) -> _M:
    try:
        return model.model_validate(dict(query))
    except ValidationError as exc:
        raise _validation_error(exc, "query string") from None


async def _info(call: Call) -> ServiceInfo:
    return call.info


_HEALTHY = HealthStatus()


async def _health(call: Call) -> HealthStatus:
    del call
    return _HEALTHY


async def _wait(call: Call) -> list[Rollout]:
    r = parse_body(WaitRequest, call.body)
    # Long poll, capped so a request never outlives proxies' and clients' read timeouts; the
    # client repeats the request until its own timeout is spent.
    timeout = min(r.timeout, call.info.max_wait_s)
    return await call.store.wait_for_rollouts(r.rollout_ids, timeout=timeout)


async def _add_spans(call: Call) -> list[Span]:
    return await call.add_spans(parse_body(SpansRequest, call.body).spans)


async def _add_llm_calls(call: Call) -> list[LLMCall]:
    return await call.add_llm_calls(parse_body(LLMCallsRequest, call.body).calls)


async def _reconcile(call: Call) -> ReconcileResult:
    report = await call.store.reconcile()
    return ReconcileResult(
        timed_out=list(report.timed_out),
        lost=list(report.lost),
        requeued=list(report.requeued),
        failed=list(report.failed),
    )


_R = "/v1/rollouts/{rollout_id}"
_A = "/v1/attempts/{attempt_id}"

OPERATIONS: tuple[Operation, ...] = (
    Operation("info", "GET", "/v1/info", "What the service is and can do", ServiceInfo,
              handler=_info, is_public=True),
    Operation("health", "GET", "/health", "Liveness: the service answers", HealthStatus,
              handler=_health, is_public=True),
    Operation("enqueue", "POST", "/v1/rollouts", "Queue rollouts", list[Rollout],
              body=EnqueueRequest),
    Operation("claim", "POST", "/v1/rollouts/claim", "Claim queuing rollouts", list[Claim],
              body=ClaimRequest),
    Operation("query_rollouts", "POST", "/v1/rollouts/query", "List rollouts by filter",
              Page[Rollout], body=RolloutQuery, body_as="query"),
    Operation("wait_for_rollouts", "POST", "/v1/rollouts/wait",
              "Wait (long poll) until rollouts are final", list[Rollout], body=WaitRequest,
              handler=_wait),
    Operation("get_rollout", "GET", _R, "Get a rollout", Rollout),
    Operation("update_rollout", "PATCH", _R, "Cancel a rollout or change its metadata",
              Rollout, body=RolloutUpdate),
    Operation("list_attempts", "GET", f"{_R}/attempts", "List a rollout's attempts",
              list[Attempt]),
    Operation("query_spans", "GET", f"{_R}/spans", "List a rollout's spans by sequence",
              Page[Span], query=RecordQuery),
    Operation("query_llm_calls", "GET", f"{_R}/llm_calls", "List a rollout's LLM calls",
              Page[LLMCall], query=RecordQuery),
    Operation("list_rewards", "GET", f"{_R}/rewards", "List a rollout's posted rewards",
              list[Reward]),
    Operation("get_attempt", "GET", _A, "Get an attempt", Attempt),
    Operation("update_attempt", "PATCH", _A, "Report an attempt's outcome", Attempt,
              body=AttemptUpdate),
    Operation("add_spans", "POST", "/v1/spans", "Store spans (idempotent)", list[Span],
              body=SpansRequest, handler=_add_spans),
    Operation("add_llm_calls", "POST", "/v1/llm_calls", "Store LLM call records (idempotent)",
              list[LLMCall], body=LLMCallsRequest, handler=_add_llm_calls),
    Operation("add_reward", "POST", "/v1/rewards",
              "Store a reward for a rollout, by rollout, response or session id (idempotent)",
              Reward, body=RewardCreate, body_as="reward"),
    Operation("record_session", "POST", "/v1/sessions",
              "Store a closed production session as a finished rollout with a new attempt "
              "(idempotent by attempt id)", Claim, body=SessionCreate, body_as="session"),
    Operation("prune", "POST", "/v1/prune",
              "Delete finished rollouts that ended before a time, with their records",
              PruneReport, body=PruneRequest, body_as="request"),
    Operation("add_resources", "POST", "/v1/resources", "Store a new resources version",
              Resources, body=ResourcesCreate, body_as="resources"),
    Operation("latest_resources", "GET", "/v1/resources/latest", "Get the latest resources",
              Resources | None),
    Operation("get_resources", "GET", "/v1/resources/{version}", "Get one resources version",
              Resources),
    Operation("start_run", "POST", "/v1/runs", "Record a training run, or resume it by id",
              Run, body=Run, body_as="run"),
    Operation("list_runs", "GET", "/v1/runs", "List runs, latest started first", Page[Run],
              query=RunListQuery),
    Operation("add_run_metrics", "POST", "/v1/runs/metrics",
              "Store runs' metrics records (idempotent by run, step and time)", None,
              body=RunMetricsRequest),
    Operation("get_run", "GET", "/v1/runs/{run_id}", "Get a run", Run),
    Operation("update_run", "PATCH", "/v1/runs/{run_id}", "Change a run's status or end time",
              Run, body=RunUpdate),
    Operation("query_run_metrics", "GET", "/v1/runs/{run_id}/metrics",
              "List a run's metrics by step", Page[RunMetrics], query=RunMetricsQuery),
    Operation("add_model_version", "POST", "/v1/model_versions",
              "Record a published model version (idempotent by run and version)",
              ModelVersion, body=ModelVersion, body_as="version"),
    Operation("list_model_versions", "GET", "/v1/model_versions",
              "List model versions, of one run or of all", list[ModelVersion],
              query=ModelVersionQuery),
    Operation("put_release", "POST", "/v1/releases",
              "Store a new canary release, or return the stored one of the same definition",
              Release, body=ReleaseCreate, body_as="release"),
    Operation("list_releases", "GET", "/v1/releases", "List releases, latest created first",
              list[Release]),
    Operation("get_release", "GET", "/v1/releases/{name}", "Get a release", Release),
    Operation("decide_release", "POST", "/v1/releases/{name}/decisions",
              "Record a decision: a gate window, a promotion or a rollback", Release,
              body=ReleaseDecision, body_as="decision"),
    Operation("heartbeat", "POST", "/v1/workers/heartbeat", "Record a worker heartbeat",
              Worker, body=HeartbeatRequest),
    Operation("list_workers", "GET", "/v1/workers", "List workers", list[Worker]),
    Operation("stats", "GET", "/v1/stats", "Counts over the whole store", StoreStats),
    Operation("reconcile", "POST", "/v1/reconcile", "Run one watchdog pass", ReconcileResult,
              handler=_reconcile),
)  # fmt: skip
