"""Request/response ⇄ call record: what to ask the engine, what to show the agent, what to store.

Pure functions, no network: ``prepare_request`` adds the fields that make an engine return token
ids and logprobs (and the sampling overrides of the rollout), ``agent_view`` removes from a reply
what the agent did not ask for, and ``build_call`` turns one exchange into an ``LLMCallCreate``.
Token ids always come from the engine; text is never re-tokenized here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fulmen.types import LLMCallCreate, LLMChoice

__all__ = [
    "CHAT",
    "COMPLETIONS",
    "TOKEN_ENDPOINTS",
    "Asked",
    "Exchange",
    "agent_chunk",
    "agent_view",
    "build_call",
    "prepare_request",
]

CHAT = "chat/completions"
COMPLETIONS = "completions"
# Endpoints whose replies carry token ids when asked; others are recorded as text only.
TOKEN_ENDPOINTS = frozenset({CHAT, COMPLETIONS})


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
    rollout runs at its configured temperature whatever the agent's code says).
    """
    out = dict(body)
    out.update(overrides)
    raw_logprobs = body.get("logprobs")
    asked_logprobs = bool(raw_logprobs) if endpoint == CHAT else _is_set(raw_logprobs)
    stream_options = body.get("stream_options")
    options = dict(stream_options) if isinstance(stream_options, Mapping) else {}
    asked = Asked(
        token_ids=bool(body.get("return_token_ids")),
        logprobs=asked_logprobs,
        usage=bool(options.get("include_usage")),
    )
    if endpoint in TOKEN_ENDPOINTS:
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
    choices = response.get("choices")
    if isinstance(choices, list):
        out["choices"] = [_strip_choice(c, asked) for c in choices]
    return out


def agent_chunk(chunk: dict[str, Any], asked: Asked) -> dict[str, Any] | None:
    """Return a chunk as the agent should see it; ``None`` drops a usage chunk not asked for."""
    if not asked.usage and chunk.get("choices") == [] and chunk.get("usage") is not None:
        return None
    return agent_view(chunk, asked)


def _strip_choice(choice: Any, asked: Asked) -> Any:
    if not isinstance(choice, dict):
        return choice
    out = dict(choice)
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
    reply rebuilt from its chunks); ``policy_version`` a version read from a response header.
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


def build_call(exchange: Exchange) -> LLMCallCreate:
    """Build the record of ``exchange``, token-level when the engine gave ids and logprobs."""
    response = exchange.response or {}
    choices = [_choice(c, exchange.endpoint) for c in _list(response.get("choices"))]
    prompt_ids = _prompt_token_ids(response)
    is_token_level = (
        exchange.endpoint in TOKEN_ENDPOINTS
        and exchange.error is None
        and prompt_ids is not None
        and bool(choices)
        and all(_is_token_level(c) for c in choices)
    )
    version = response.get("policy_version")
    if version is None:
        version = exchange.policy_version
    usage = response.get("usage")
    error = exchange.error
    if error is None and isinstance(response.get("error"), dict):
        error = response["error"]  # an error event inside an otherwise successful stream
    return LLMCallCreate(
        call_id=exchange.call_id,
        rollout_id=exchange.rollout_id,
        attempt_id=exchange.attempt_id,
        endpoint=exchange.endpoint,
        request=exchange.request,
        response=exchange.response,
        prompt_token_ids=prompt_ids,
        choices=choices,
        is_token_level=is_token_level,
        response_id=_str(response.get("id")),
        model=_str(response.get("model")) or _str(exchange.request.get("model")),
        policy_version=None if version is None else str(version),
        upstream=exchange.upstream,
        is_stream=exchange.is_stream,
        started_at=exchange.started_at,
        latency_s=exchange.latency_s,
        usage=usage if isinstance(usage, dict) else {},
        error=error,
    )


def _choice(raw: Any, endpoint: str) -> LLMChoice:
    if not isinstance(raw, dict):
        return LLMChoice()
    logprobs = raw.get("logprobs")
    if endpoint == CHAT:
        message = raw.get("message")
        text = message.get("content") if isinstance(message, dict) else None
        entries = logprobs.get("content") if isinstance(logprobs, dict) else None
        values = [e.get("logprob") for e in entries if isinstance(e, dict)] if entries else None
    else:
        text = raw.get("text")
        values = logprobs.get("token_logprobs") if isinstance(logprobs, dict) else None
    index = raw.get("index")
    finish = raw.get("finish_reason")
    return LLMChoice(
        index=index if isinstance(index, int) else 0,
        text=text if isinstance(text, str) else None,
        token_ids=_ints(raw.get("token_ids")),
        logprobs=_floats(values),
        finish_reason=finish if isinstance(finish, str) else None,
    )


def _prompt_token_ids(response: Mapping[str, Any]) -> list[int] | None:
    top = _ints(response.get("prompt_token_ids"))
    if top is not None:
        return top
    # /v1/completions puts the prompt on each choice; one record holds one prompt.
    per_choice = [_ints(c.get("prompt_token_ids")) for c in _dicts(response.get("choices"))]
    if per_choice and per_choice[0] is not None and all(p == per_choice[0] for p in per_choice):
        return per_choice[0]
    return None


def _is_token_level(choice: LLMChoice) -> bool:
    return (
        choice.token_ids is not None
        and choice.logprobs is not None
        and len(choice.token_ids) == len(choice.logprobs)
    )


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in _list(value) if isinstance(v, dict)]


def _ints(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(type(v) is int for v in value):
        return value
    return None


def _floats(value: Any) -> list[float] | None:
    if isinstance(value, list) and all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in value
    ):
        return [float(v) for v in value]
    return None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None
