"""The route table of the store service: one small handler per ``Store`` method.

Each ``Operation`` names its HTTP method and path, the models of its body, query string and
response, and a handler ``(call) -> JSON bytes``. The server (``fulmen.store.server``) mounts
the table on Starlette and the OpenAPI spec (``fulmen.store.openapi``) is generated from it, so
routes and documentation cannot disagree. Handlers validate input with pydantic and let
``FulmenError`` propagate; the server turns errors into JSON.
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
    UNSET,
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

    ``handler`` returns the method's result; ``encode`` writes it as ``response`` says (the
    same type the OpenAPI spec documents and the client parses).
    """

    name: str
    method: str
    path: str
    summary: str
    handler: Callable[[Call], Awaitable[Any]]
    response: Any
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    is_public: bool = False  # readable without a token
    _adapter: TypeAdapter[Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        response = self.response if self.response is not None else type(None)
        object.__setattr__(self, "_adapter", TypeAdapter(response))

    def encode(self, result: Any) -> bytes:
        """Return ``result`` as the JSON body of this operation's answer."""
        return self._adapter.dump_json(result)


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


async def _info(call: Call) -> Any:
    return call.info


_HEALTHY = HealthStatus()


async def _health(call: Call) -> HealthStatus:
    del call
    return _HEALTHY


async def _enqueue(call: Call) -> Any:
    request = parse_body(EnqueueRequest, call.body)
    return await call.store.enqueue(request.rollouts)


async def _claim(call: Call) -> Any:
    r = parse_body(ClaimRequest, call.body)
    claims = await call.store.claim(r.worker_id, limit=r.limit, modes=r.modes, claim_id=r.claim_id)
    return claims


async def _query_rollouts(call: Call) -> Any:
    page = await call.store.query_rollouts(parse_body(RolloutQuery, call.body))
    return page


async def _wait(call: Call) -> Any:
    r = parse_body(WaitRequest, call.body)
    # Long poll, capped so a request never outlives proxies' and clients' read timeouts; the
    # client repeats the request until its own timeout is spent.
    timeout = min(r.timeout, call.info.max_wait_s)
    return await call.store.wait_for_rollouts(r.rollout_ids, timeout=timeout)


async def _get_rollout(call: Call) -> Any:
    rollout = await call.store.get_rollout(_path_parameter(call, "rollout_id"))
    return rollout


async def _update_rollout(call: Call) -> Any:
    r = parse_body(RolloutUpdate, call.body)
    rollout = await call.store.update_rollout(
        _path_parameter(call, "rollout_id"),
        status=r.status if r.status is not None else UNSET,
        metadata=r.metadata if r.metadata is not None else UNSET,
    )
    return rollout


async def _list_attempts(call: Call) -> Any:
    return await call.store.list_attempts(_path_parameter(call, "rollout_id"))


async def _query_spans(call: Call) -> Any:
    q = _parse_query(RecordQuery, call.query)
    page = await call.store.query_spans(
        _path_parameter(call, "rollout_id"),
        attempt_id=q.attempt_id,
        after_sequence=q.after_sequence,
        limit=q.limit,
    )
    return page


async def _query_llm_calls(call: Call) -> Any:
    q = _parse_query(RecordQuery, call.query)
    page = await call.store.query_llm_calls(
        _path_parameter(call, "rollout_id"),
        attempt_id=q.attempt_id,
        after_sequence=q.after_sequence,
        limit=q.limit,
    )
    return page


async def _get_attempt(call: Call) -> Any:
    attempt = await call.store.get_attempt(_path_parameter(call, "attempt_id"))
    return attempt


async def _update_attempt(call: Call) -> Any:
    r = parse_body(AttemptUpdate, call.body)
    attempt = await call.store.update_attempt(
        _path_parameter(call, "attempt_id"),
        status=r.status if r.status is not None else UNSET,
        error=r.error if "error" in r.model_fields_set else UNSET,
    )
    return attempt


async def _add_spans(call: Call) -> Any:
    request = parse_body(SpansRequest, call.body)
    return await call.add_spans(request.spans)


async def _add_llm_calls(call: Call) -> Any:
    request = parse_body(LLMCallsRequest, call.body)
    return await call.add_llm_calls(request.calls)


async def _add_resources(call: Call) -> Any:
    resources = await call.store.add_resources(parse_body(ResourcesCreate, call.body))
    return resources


async def _latest_resources(call: Call) -> Any:
    return await call.store.latest_resources()


async def _get_resources(call: Call) -> Any:
    version = _path_parameter(call, "version")
    return await call.store.get_resources(version)


async def _add_reward(call: Call) -> Any:
    reward = await call.store.add_reward(parse_body(RewardCreate, call.body))
    return reward


async def _list_rewards(call: Call) -> Any:
    return await call.store.list_rewards(_path_parameter(call, "rollout_id"))


async def _record_session(call: Call) -> Any:
    claim = await call.store.record_session(parse_body(SessionCreate, call.body))
    return claim


async def _prune(call: Call) -> Any:
    report = await call.store.prune(parse_body(PruneRequest, call.body))
    return report


async def _heartbeat(call: Call) -> Any:
    r = parse_body(HeartbeatRequest, call.body)
    worker = await call.store.heartbeat(r.worker_id, attempt_ids=r.attempt_ids, metadata=r.metadata)
    return worker


async def _list_workers(call: Call) -> Any:
    return await call.store.list_workers()


async def _stats(call: Call) -> Any:
    return await call.store.stats()


async def _reconcile(call: Call) -> Any:
    report = await call.store.reconcile()
    result = ReconcileResult(
        timed_out=list(report.timed_out),
        lost=list(report.lost),
        requeued=list(report.requeued),
        failed=list(report.failed),
    )
    return result


async def _start_run(call: Call) -> Any:
    run = await call.store.start_run(parse_body(Run, call.body))
    return run


async def _list_runs(call: Call) -> Any:
    q = _parse_query(RunListQuery, call.query)
    page = await call.store.list_runs(limit=q.limit, offset=q.offset)
    return page


async def _get_run(call: Call) -> Any:
    return await call.store.get_run(_path_parameter(call, "run_id"))


async def _update_run(call: Call) -> Any:
    r = parse_body(RunUpdate, call.body)
    run = await call.store.update_run(
        _path_parameter(call, "run_id"),
        status=r.status if r.status is not None else UNSET,
        ended_at=r.ended_at if "ended_at" in r.model_fields_set else UNSET,
    )
    return run


async def _add_run_metrics(call: Call) -> Any:
    await call.store.add_run_metrics(parse_body(RunMetricsRequest, call.body).metrics)
    return None


async def _query_run_metrics(call: Call) -> Any:
    q = _parse_query(RunMetricsQuery, call.query)
    page = await call.store.query_run_metrics(
        _path_parameter(call, "run_id"), after_step=q.after_step, limit=q.limit
    )
    return page


async def _add_model_version(call: Call) -> Any:
    version = await call.store.add_model_version(parse_body(ModelVersion, call.body))
    return version


async def _list_model_versions(call: Call) -> Any:
    q = _parse_query(ModelVersionQuery, call.query)
    return await call.store.list_model_versions(q.run_id)


async def _put_release(call: Call) -> Any:
    return await call.store.put_release(parse_body(ReleaseCreate, call.body))


async def _list_releases(call: Call) -> Any:
    return await call.store.list_releases()


async def _get_release(call: Call) -> Any:
    return await call.store.get_release(_path_parameter(call, "name"))


async def _decide_release(call: Call) -> Any:
    decision = parse_body(ReleaseDecision, call.body)
    return await call.store.decide_release(_path_parameter(call, "name"), decision)


_R = "/v1/rollouts/{rollout_id}"
_A = "/v1/attempts/{attempt_id}"

OPERATIONS: tuple[Operation, ...] = (
    Operation("info", "GET", "/v1/info", "What the service is and can do", _info, ServiceInfo,
              is_public=True),
    Operation("health", "GET", "/health", "Liveness: the service answers", _health,
              HealthStatus, is_public=True),
    Operation("enqueue", "POST", "/v1/rollouts", "Queue rollouts", _enqueue, list[Rollout],
              body=EnqueueRequest),
    Operation("claim", "POST", "/v1/rollouts/claim", "Claim queuing rollouts", _claim,
              list[Claim], body=ClaimRequest),
    Operation("query_rollouts", "POST", "/v1/rollouts/query", "List rollouts by filter",
              _query_rollouts, Page[Rollout], body=RolloutQuery),
    Operation("wait_for_rollouts", "POST", "/v1/rollouts/wait",
              "Wait (long poll) until rollouts are final", _wait, list[Rollout], body=WaitRequest),
    Operation("get_rollout", "GET", _R, "Get a rollout", _get_rollout, Rollout),
    Operation("update_rollout", "PATCH", _R, "Cancel a rollout or change its metadata",
              _update_rollout, Rollout, body=RolloutUpdate),
    Operation("list_attempts", "GET", f"{_R}/attempts", "List a rollout's attempts",
              _list_attempts, list[Attempt]),
    Operation("query_spans", "GET", f"{_R}/spans", "List a rollout's spans by sequence",
              _query_spans, Page[Span], query=RecordQuery),
    Operation("query_llm_calls", "GET", f"{_R}/llm_calls", "List a rollout's LLM calls",
              _query_llm_calls, Page[LLMCall], query=RecordQuery),
    Operation("list_rewards", "GET", f"{_R}/rewards", "List a rollout's posted rewards",
              _list_rewards, list[Reward]),
    Operation("get_attempt", "GET", _A, "Get an attempt", _get_attempt, Attempt),
    Operation("update_attempt", "PATCH", _A, "Report an attempt's outcome", _update_attempt,
              Attempt, body=AttemptUpdate),
    Operation("add_spans", "POST", "/v1/spans", "Store spans (idempotent)", _add_spans,
              list[Span], body=SpansRequest),
    Operation("add_llm_calls", "POST", "/v1/llm_calls", "Store LLM call records (idempotent)",
              _add_llm_calls, list[LLMCall], body=LLMCallsRequest),
    Operation("add_reward", "POST", "/v1/rewards",
              "Store a reward for a rollout, by rollout, response or session id (idempotent)",
              _add_reward, Reward, body=RewardCreate),
    Operation("record_session", "POST", "/v1/sessions",
              "Store a closed production session as a finished rollout with a new attempt "
              "(idempotent by attempt id)", _record_session, Claim, body=SessionCreate),
    Operation("prune", "POST", "/v1/prune",
              "Delete finished rollouts that ended before a time, with their records",
              _prune, PruneReport, body=PruneRequest),
    Operation("add_resources", "POST", "/v1/resources", "Store a new resources version",
              _add_resources, Resources, body=ResourcesCreate),
    Operation("latest_resources", "GET", "/v1/resources/latest", "Get the latest resources",
              _latest_resources, Resources | None),
    Operation("get_resources", "GET", "/v1/resources/{version}", "Get one resources version",
              _get_resources, Resources),
    Operation("start_run", "POST", "/v1/runs", "Record a training run, or resume it by id",
              _start_run, Run, body=Run),
    Operation("list_runs", "GET", "/v1/runs", "List runs, latest started first", _list_runs,
              Page[Run], query=RunListQuery),
    Operation("add_run_metrics", "POST", "/v1/runs/metrics",
              "Store runs' metrics records (idempotent by run, step and time)", _add_run_metrics,
              None, body=RunMetricsRequest),
    Operation("get_run", "GET", "/v1/runs/{run_id}", "Get a run", _get_run, Run),
    Operation("update_run", "PATCH", "/v1/runs/{run_id}", "Change a run's status or end time",
              _update_run, Run, body=RunUpdate),
    Operation("query_run_metrics", "GET", "/v1/runs/{run_id}/metrics",
              "List a run's metrics by step", _query_run_metrics, Page[RunMetrics],
              query=RunMetricsQuery),
    Operation("add_model_version", "POST", "/v1/model_versions",
              "Record a published model version (idempotent by run and version)",
              _add_model_version, ModelVersion, body=ModelVersion),
    Operation("list_model_versions", "GET", "/v1/model_versions",
              "List model versions, of one run or of all", _list_model_versions,
              list[ModelVersion], query=ModelVersionQuery),
    Operation("put_release", "POST", "/v1/releases",
              "Store a new canary release, or return the stored one of the same definition",
              _put_release, Release, body=ReleaseCreate),
    Operation("list_releases", "GET", "/v1/releases", "List releases, latest created first",
              _list_releases, list[Release]),
    Operation("get_release", "GET", "/v1/releases/{name}", "Get a release", _get_release,
              Release),
    Operation("decide_release", "POST", "/v1/releases/{name}/decisions",
              "Record a decision: a gate window, a promotion or a rollback",
              _decide_release, Release, body=ReleaseDecision),
    Operation("heartbeat", "POST", "/v1/workers/heartbeat", "Record a worker heartbeat",
              _heartbeat, Worker, body=HeartbeatRequest),
    Operation("list_workers", "GET", "/v1/workers", "List workers", _list_workers, list[Worker]),
    Operation("stats", "GET", "/v1/stats", "Counts over the whole store", _stats, StoreStats),
    Operation("reconcile", "POST", "/v1/reconcile", "Run one watchdog pass", _reconcile,
              ReconcileResult),
)  # fmt: skip
