"""Request/response ⇄ call record: what to ask the engine, what to show the agent, what to store.

Pure functions, no network: ``prepare_request`` adds the fields that make an engine return token
ids and logprobs (and the sampling overrides of the rollout), ``agent_view`` removes from a reply
what the agent did not ask for, and ``build_call`` turns one exchange into an ``LLMCallCreate``.
Token ids always come from the engine; text is never re-tokenized here.

``build_call`` assembles the record without running pydantic's validation (``assembled``):
every field is either made by the gateway (ids, clocks) or read from JSON that orjson parsed,
which holds only JSON types and finite numbers (orjson refuses ``NaN``, ``Infinity`` and
``1e400``), and the typed fields are type-checked as they are read. Validating the same values
again took two thirds of the recorder's CPU per record (``tests/gateway/test_call_records.py``
checks that every record built here validates unchanged).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from fulmen.types import LLMCallCreate, LLMChoice
from fulmen.types.assembly import assembled
from fulmen.types.releases import ReleaseArm
from fulmen.wire.json_values import as_array, as_object
from fulmen.wire.openai import CHAT, TOKEN_ENDPOINTS

__all__ = [
    "Asked",
    "Exchange",
    "agent_chunk",
    "agent_view",
    "build_call",
    "prepare_request",
]


@dataclass(frozen=True)
class Asked:
    """What the agent itself asked for, so the gateway's own additions can be removed again."""

    token_ids: bool = False
    logprobs: bool = False
    usage: bool = False


def prepare_request(
    body: Mapping[str, Any],
    *,
    endpoint: str,
    overrides: Mapping[str, Any],
    is_token_level: bool,
) -> tuple[dict[str, Any], Asked]:
    """Return the body to send upstream, and what the agent asked for.

    Sampling ``overrides`` from the rollout's resources win over the agent's values (a validation
    rollout runs at its configured temperature whatever the agent's code says; in a mode that
    samples the behaviour policy they also hold every distribution field at its neutral value,
    see ``LLMResource.request_fields``, so the agent's ``top_k`` never reaches the engine).
    """
    out = dict(body)
    out.update(overrides)
    if "max_tokens" in overrides and "max_completion_tokens" in out:
        # Engines read max_completion_tokens first (OpenAI's newer name), so the configured
        # cap must replace it too, or an agent that sends it escapes the cap.
        out["max_completion_tokens"] = overrides["max_tokens"]
    if endpoint not in TOKEN_ENDPOINTS:
        return out, Asked(token_ids=True, logprobs=True, usage=True)  # nothing added: hide none
    raw_logprobs = body.get("logprobs")
    asked_logprobs = bool(raw_logprobs) if endpoint == CHAT else _is_set(raw_logprobs)
    options = dict(as_object(body.get("stream_options")) or {})
    asked = Asked(
        token_ids=bool(body.get("return_token_ids")),
        logprobs=asked_logprobs,
        usage=bool(options.get("include_usage")),
    )
    if is_token_level:
        out["return_token_ids"] = True
        if not asked_logprobs:
            out["logprobs"] = True if endpoint == CHAT else 1
    if body.get("stream"):
        # Usage of a streamed call only arrives if asked for; the record needs it.
        out["stream_options"] = {**options, "include_usage": True}
    return out, asked


def _is_set(value: Any) -> bool:
    return value is not None and value is not False


def agent_view(response: dict[str, Any], asked: Asked) -> dict[str, Any]:
    """``response`` without the token ids and logprobs the gateway added on its own behalf."""
    if asked.token_ids and asked.logprobs:
        return response
    out = dict(response)
    if not asked.token_ids:
        out.pop("prompt_token_ids", None)
    if "choices" in response:
        out["choices"] = [_strip_choice(c, asked) for c in as_array(response["choices"])]
    return out


def agent_chunk(chunk: dict[str, Any], asked: Asked) -> dict[str, Any] | None:
    """Return a chunk as the agent should see it; ``None`` drops a usage chunk not asked for."""
    if not asked.usage and chunk.get("choices") == [] and chunk.get("usage") is not None:
        return None
    return agent_view(chunk, asked)


def _strip_choice(choice: Any, asked: Asked) -> Any:
    fields = as_object(choice)
    if fields is None:
        return choice
    out = dict(fields)
    if not asked.token_ids:
        out.pop("token_ids", None)
        out.pop("prompt_token_ids", None)
    if not asked.logprobs and "logprobs" in out:
        out["logprobs"] = None
    return out


@dataclass(frozen=True)
class Exchange:
    """One call as the gateway saw it, before it becomes a record.

    ``request`` is the agent's body; ``response`` the engine's full reply (for a stream, the
    reply rebuilt from its chunks), from which the token-level fields are read; ``shown`` the
    reply as the agent received it, which is what the record keeps as its ``response`` (the
    token ids and logprobs the gateway asked for on its own are in the record's typed fields,
    so storing them twice would only cost space and validation time); ``policy_version`` a
    version read from a response header; ``agent_name`` the agent the caller named;
    ``client_headers`` the session headers it sent (``GatewayConfig.session_headers``);
    ``engine_endpoint`` the endpoint the engine served when it differs from ``endpoint`` (a
    Responses or Messages call sent as a chat completion), which is how ``response`` is read;
    ``release`` and ``arm`` the canary release that routed the call and the arm that served it.
    """

    call_id: str
    rollout_id: str | None
    attempt_id: str | None
    endpoint: str
    request: dict[str, Any]
    response: dict[str, Any] | None
    upstream: str | None
    is_stream: bool
    started_at: float
    latency_s: float | None
    error: dict[str, Any] | None = None
    policy_version: str | None = None
    shown: dict[str, Any] | None = None
    agent_name: str | None = None
    engine_endpoint: str | None = None
    client_headers: dict[str, str] | None = None
    release: str | None = None
    arm: ReleaseArm | None = None


def build_call(exchange: Exchange) -> LLMCallCreate:
    """Build the record of ``exchange``, token-level when the engine gave ids and logprobs."""
    response = exchange.response or {}
    served = exchange.engine_endpoint or exchange.endpoint
    choices = [_choice(c, served) for c in as_array(response.get("choices"))]
    prompt_ids = _prompt_token_ids(response)
    is_token_level = (
        served in TOKEN_ENDPOINTS
        and exchange.error is None
        and prompt_ids is not None
        and bool(choices)
        and all(_is_token_level(c) for c in choices)
    )
    version = response.get("policy_version")
    if version is None:
        version = exchange.policy_version
    usage = as_object(response.get("usage"))
    # An error event inside an otherwise successful stream counts as the call's error.
    error = exchange.error or as_object(response.get("error"))
    fields = dict(
        call_id=exchange.call_id,
        rollout_id=exchange.rollout_id,
        attempt_id=exchange.attempt_id,
        endpoint=exchange.endpoint,
        request=exchange.request,
        response=exchange.response if exchange.shown is None else exchange.shown,
        prompt_token_ids=prompt_ids,
        choices=choices,
        is_token_level=is_token_level,
        # The id the agent saw: in-process spans name the call by it.
        response_id=_str((exchange.shown or response).get("id")),
        # The model column holds text without NUL; an agent's odd name stays in ``request``.
        model=_text(response.get("model")) or _text(exchange.request.get("model")),
        policy_version=None if version is None else str(version),
        upstream=exchange.upstream,
        is_stream=exchange.is_stream,
        started_at=exchange.started_at,
        latency_s=exchange.latency_s,
        usage=usage or {},
        error=error,
        agent_name=exchange.agent_name,
        client_headers=exchange.client_headers or {},
        release=exchange.release,
        arm=exchange.arm,
    )
    return assembled(LLMCallCreate, fields)


def _choice(value: Any, endpoint: str) -> LLMChoice:
    raw = as_object(value)
    if raw is None:
        return LLMChoice()
    logprobs = as_object(raw.get("logprobs")) or {}
    values: Any
    if endpoint == CHAT:
        text = (as_object(raw.get("message")) or {}).get("content")
        entries = [as_object(e) or {} for e in as_array(logprobs.get("content"))]
        has_entries = isinstance(logprobs.get("content"), list)
        values = [e.get("logprob") for e in entries] if has_entries else None
    else:
        text = raw.get("text")
        values = logprobs.get("token_logprobs")
    index = raw.get("index")
    finish = raw.get("finish_reason")
    fields = {
        "index": index if type(index) is int else 0,
        "text": text if isinstance(text, str) else None,
        "token_ids": _ints(raw.get("token_ids")),
        "logprobs": _floats(values),
        "finish_reason": finish if isinstance(finish, str) else None,
    }
    return assembled(LLMChoice, fields)


def _prompt_token_ids(response: Mapping[str, Any]) -> list[int] | None:
    top = _ints(response.get("prompt_token_ids"))
    if top is not None:
        return top
    # /v1/completions puts the prompt on each choice; one record holds one prompt.
    choices = [as_object(c) or {} for c in as_array(response.get("choices"))]
    per_choice = [_ints(c.get("prompt_token_ids")) for c in choices]
    if per_choice and per_choice[0] is not None and all(p == per_choice[0] for p in per_choice):
        return per_choice[0]
    return None


def _is_token_level(choice: LLMChoice) -> bool:
    return (
        choice.token_ids is not None
        and choice.logprobs is not None
        and len(choice.token_ids) == len(choice.logprobs)
    )


def _ints(value: Any) -> list[int] | None:
    items = as_array(value)
    if isinstance(value, list) and all(type(v) is int for v in items):
        return cast("list[int]", items)
    return None


def _floats(value: Any) -> list[float] | None:
    items = as_array(value)
    if not isinstance(value, list) or not all(type(v) is float or type(v) is int for v in items):
        return None
    try:
        floats = [float(v) for v in items]
    except OverflowError:  # an integer beyond float range
        return None
    # orjson never gives a non-finite number; this keeps any other source's record storable.
    return floats if all(map(math.isfinite, floats)) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and "\x00" not in value else None
