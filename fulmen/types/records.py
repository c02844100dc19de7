"""What happened inside an attempt: OpenTelemetry-shaped spans and LLM call records.

Both carry a ``sequence`` number assigned by the store, strictly increasing per rollout across
spans *and* calls, so events of one rollout are ordered without comparing clocks. Both are
written idempotently: the same ``(attempt_id, span_id)`` or ``call_id`` twice is stored once.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from pydantic import BaseModel, ConfigDict, Field

from fulmen.types.limits import FiniteFloat, Id, JsonData, Label, Text, TraceId
from fulmen.types.releases import ReleaseArm

__all__ = [
    "AGENT_NAME_HEADER",
    "LLMCall",
    "LLMCallCreate",
    "LLMChoice",
    "Span",
    "SpanCreate",
    "SpanEvent",
    "SpanStatus",
    "SpanStatusCode",
]


# The request header that names the agent making a call (percent-encoded UTF-8): fulmen's HTTP
# hook stamps it inside ``as_agent`` or a framework node, the gateway stores it on the record.
AGENT_NAME_HEADER: Final = "x-fulmen-agent"


class SpanStatusCode(StrEnum):
    """OpenTelemetry's span status codes."""

    UNSET = "unset"
    OK = "ok"
    ERROR = "error"


class SpanStatus(BaseModel):
    """A span's status and optional message."""

    model_config = ConfigDict(extra="forbid")

    code: SpanStatusCode = SpanStatusCode.UNSET
    message: str | None = None


class SpanEvent(BaseModel):
    """A timestamped event inside a span (seconds since the epoch, from the emitter's clock)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    timestamp: FiniteFloat
    attributes: dict[str, JsonData] = Field(default_factory=dict)


class SpanCreate(BaseModel):
    """A span as an emitter sends it; ids are lowercase hex as in OTLP JSON."""

    model_config = ConfigDict(extra="forbid")

    rollout_id: Id
    attempt_id: Id
    trace_id: TraceId
    span_id: TraceId
    parent_id: TraceId | None = None
    name: Text
    attributes: dict[str, JsonData] = Field(default_factory=dict)
    events: list[SpanEvent] = Field(default_factory=list)
    status: SpanStatus = Field(default_factory=SpanStatus)
    start_time: FiniteFloat
    end_time: FiniteFloat | None = None


class Span(SpanCreate):
    """A stored span: the emitted span plus its store-assigned sequence number."""

    sequence: int


class LLMChoice(BaseModel):
    """One generated choice of an LLM call, at token level when the engine could give it.

    ``token_ids`` and ``logprobs`` have the same length when both are present.
    """

    model_config = ConfigDict(extra="forbid")

    index: int = 0
    text: str | None = None
    token_ids: list[int] | None = None
    logprobs: list[FiniteFloat] | None = None
    finish_reason: str | None = None


class LLMCallCreate(BaseModel):
    """What the gateway saw for one model call.

    Attributes:
        call_id: gateway-assigned id; writing the same id twice stores it once.
        rollout_id / attempt_id: ``None`` for untracked calls through plain ``/v1``.
        request / response: the JSON as the agent sent it and as the agent received it (token
            ids and logprobs the gateway asked for on the agent's behalf are kept only in the
            typed fields below, not duplicated here).
        prompt_token_ids / choices: token-level view; empty when the upstream gave no ids.
        is_token_level: True when ids and logprobs make the call usable for token-level RL.
        response_id: the ``id`` of the response, used to join in-process spans to this call.
        model / policy_version: which model and which weights answered.
        latency_s / usage / error: timing, token counts and an error body for failed calls.
        agent_name: the agent that made the call, as the agent's process named it in the
            ``x-fulmen-agent`` header (``as_agent`` or a framework node); ``None`` when unnamed.
        client_headers: the headers a client sends to tell its sessions, threads and
            sub-agents apart (``GatewayConfig.session_headers``, such as Claude Code's
            ``x-claude-code-session-id`` or Codex's ``session-id``), lower-case names.
        release / arm: the canary release that routed the call and the arm that served it
            (``fulmen.types.releases``); ``None`` outside a release.
    """

    model_config = ConfigDict(extra="forbid")

    call_id: Id
    rollout_id: Id | None = None
    attempt_id: Id | None = None
    endpoint: str = "chat/completions"
    request: dict[str, JsonData] = Field(default_factory=dict)
    response: dict[str, JsonData] | None = None
    prompt_token_ids: list[int] | None = None
    choices: list[LLMChoice] = Field(default_factory=list)
    is_token_level: bool = False
    response_id: str | None = None
    model: Text | None = None
    policy_version: str | None = None
    upstream: str | None = None
    is_stream: bool = False
    started_at: FiniteFloat
    latency_s: FiniteFloat | None = None
    usage: dict[str, JsonData] = Field(default_factory=dict)
    error: dict[str, JsonData] | None = None
    agent_name: str | None = Field(default=None, min_length=1, max_length=256)
    client_headers: dict[Label, Label] = Field(default_factory=dict, max_length=16)
    release: Id | None = None
    arm: ReleaseArm | None = None


class LLMCall(LLMCallCreate):
    """A stored LLM call: the record plus its store-assigned sequence number.

    Untracked calls (no rollout) get sequence 0.
    """

    sequence: int
