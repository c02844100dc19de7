"""An OpenAI-compatible upstream that answers with a rollout's recorded replies, in order.

``RecordedReplies`` holds the recorded calls of one attempt and the request each one sent to
the engine; ``create_replay_app`` serves them as an engine would, behind fulmen's normal
gateway (which records the replay's calls like any others). A request is answered with the
first recorded call still unserved whose request equals it (so concurrent calls that arrive
in another order still match), its token ids and logprobs included, as a whole reply or as
server-sent events when the request streams.

A request that equals no unserved recorded request is a *divergence*; it is compared with the
next recorded call in order and kept (``divergences``). What it gets depends on the policy:
``stop`` (the default) answers 400 with an OpenAI-shaped error ``replay_diverged`` naming the
call, so the agent fails where its behaviour changed; ``serve`` answers with that next recorded
reply anyway and goes on, so the agent runs to the end on the recorded replies. A request
beyond the recorded calls is always refused (``replay_exhausted``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from fulmen.debugging.divergence import Divergence, describe_divergence, differing_fields
from fulmen.types import LLMCall
from fulmen.wire.json_values import as_array

__all__ = [
    "DivergencePolicy",
    "RecordedReplies",
    "ReplayAnswer",
    "create_replay_app",
    "engine_reply",
]

_log = logging.getLogger(__name__)

DivergencePolicy = Literal["stop", "serve"]


@dataclass(frozen=True)
class ReplayAnswer:
    """The recorded call that answers a request, or the OpenAI error body that refuses it."""

    call: LLMCall | None
    error: dict[str, Any] | None = None


class RecordedReplies:
    """The recorded calls of one attempt and which of them the replay has served.

    Args:
        calls: the attempt's calls in store order.
        expected: for each call, ``(endpoint, body)`` as the engine received it.
        on_divergence: ``stop`` or ``serve`` (see the module docstring).
    """

    def __init__(
        self,
        calls: Sequence[LLMCall],
        expected: Sequence[tuple[str, dict[str, Any]]],
        *,
        on_divergence: DivergencePolicy = "stop",
    ) -> None:
        if len(calls) != len(expected):
            raise ValueError(f"{len(calls)} calls but {len(expected)} expected requests")
        self._calls = list(calls)
        self._expected = list(expected)
        self._pending = list(range(len(calls)))
        self._policy: DivergencePolicy = on_divergence
        self.requests = 0
        self.served: list[int] = []
        self.divergences: list[Divergence] = []

    @property
    def unserved(self) -> int:
        """Count the recorded calls no request has consumed."""
        return len(self._pending)

    def answer(self, endpoint: str, body: dict[str, Any]) -> ReplayAnswer:
        """Pick the recorded call that answers this request, or the error to answer with."""
        self.requests += 1
        number = self.requests
        for position, index in enumerate(self._pending):
            if self._expected[index] == (endpoint, body):
                return self._serve(position)
        if not self._pending:
            self.divergences.append(Divergence(number, None, (), "", served=False))
            return ReplayAnswer(None, _error("replay_exhausted", self.divergences[-1].summary()))
        index = self._pending[0]
        want_endpoint, want = self._expected[index]
        recorded = {"endpoint": want_endpoint, **want}
        replayed = {"endpoint": endpoint, **body}
        divergence = Divergence(
            number,
            index + 1,
            differing_fields(recorded, replayed),
            describe_divergence(recorded, replayed),
            served=self._policy == "serve",
        )
        self.divergences.append(divergence)
        _log.warning("replay diverged: %s", divergence.summary())
        if self._policy == "serve":
            return self._serve(0)
        # The summary only: a diff could quote ``return_token_ids``, which the gateway reads in
        # a 400 as "this upstream rejects token ids" and would resend without them.
        return ReplayAnswer(None, _error("replay_diverged", f"replay: {divergence.summary()}"))

    def _serve(self, position: int) -> ReplayAnswer:
        index = self._pending.pop(position)
        self.served.append(index)
        return ReplayAnswer(self._calls[index])


def _error(code: str, message: str) -> dict[str, Any]:
    return {"message": message, "type": "invalid_request_error", "param": None, "code": code}


def engine_reply(call: LLMCall) -> dict[str, Any]:
    """Return the reply the engine gave ``call``: what the agent saw plus token ids and logprobs.

    The record keeps the reply as the agent saw it and the token-level fields apart; the
    gateway strips the latter again for an agent that did not ask for them.
    """
    reply: dict[str, Any] = dict(call.response or {})
    if call.prompt_token_ids is not None:
        reply.setdefault("prompt_token_ids", call.prompt_token_ids)
    recorded = {c.index: c for c in call.choices}
    choices: list[Any] = []
    for raw in as_array(reply.get("choices")):
        choice = dict(raw) if isinstance(raw, dict) else raw
        if isinstance(choice, dict):
            _add_tokens(choice, recorded.get(choice.get("index", 0)), call.endpoint)
        choices.append(choice)
    if choices:
        reply["choices"] = choices
    return reply


def _add_tokens(choice: dict[str, Any], recorded: Any, endpoint: str) -> None:
    if recorded is None:
        return
    if recorded.token_ids is not None:
        choice.setdefault("token_ids", recorded.token_ids)
    if recorded.logprobs is not None and not choice.get("logprobs"):
        if endpoint == "chat/completions":
            content = [{"token": "", "logprob": v, "bytes": None, "top_logprobs": []}
                       for v in recorded.logprobs]  # fmt: skip
            choice["logprobs"] = {"content": content}
        else:
            choice["logprobs"] = {"token_logprobs": recorded.logprobs,
                                  "tokens": [""] * len(recorded.logprobs)}  # fmt: skip


def _chunks(reply: dict[str, Any], endpoint: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """Split a whole reply into the chunks of its stream: content, then finish, then usage."""
    is_chat = endpoint == "chat/completions"
    top = {k: reply[k] for k in ("id", "created", "model") if k in reply}
    top["object"] = "chat.completion.chunk" if is_chat else "text_completion"
    first: dict[str, Any] = {**top, "choices": []}
    if "prompt_token_ids" in reply:
        first["prompt_token_ids"] = reply["prompt_token_ids"]
    finish: dict[str, Any] = {**top, "choices": []}
    for raw in reply.get("choices") or []:
        choice: dict[str, Any] = raw if isinstance(raw, dict) else {}
        index = choice.get("index", 0)
        part: dict[str, Any] = {"index": index, "finish_reason": None}
        for key in ("token_ids", "logprobs"):
            if choice.get(key) is not None:
                part[key] = choice[key]
        if is_chat:
            message = choice.get("message") or {}
            delta: dict[str, Any] = {"role": message.get("role", "assistant"),
                                     "content": message.get("content")}  # fmt: skip
            calls = message.get("tool_calls") or []
            if calls:
                delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(calls)]
            part["delta"] = delta
        else:
            part["text"] = choice.get("text", "")
        first["choices"].append(part)
        end = {"index": index, "finish_reason": choice.get("finish_reason")}
        finish["choices"].append({**end, "delta": {}} if is_chat else {**end, "text": ""})
    chunks = [first, finish]
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") and "usage" in reply:
        chunks.append({**top, "choices": [], "usage": reply["usage"]})
    return chunks


def create_replay_app(replies: RecordedReplies) -> Starlette:
    """Build the upstream app that answers ``/v1/chat/completions`` and ``/v1/completions``."""

    async def complete(request: Request) -> Response:
        endpoint = request.path_params["endpoint"]
        body = orjson.loads(await request.body())
        answer = replies.answer(endpoint, body)
        if answer.call is None:
            return _json({"error": answer.error}, 400)
        call = answer.call
        if call.error is not None and call.response is None:
            return _json({"error": call.error}, 500)  # the recorded call failed: so does this
        reply = engine_reply(call)
        if not body.get("stream"):
            return _json(reply, 200)

        async def events() -> AsyncIterator[bytes]:
            for chunk in _chunks(reply, endpoint, body):
                yield b"data: " + orjson.dumps(chunk) + b"\n\n"
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def models(request: Request) -> Response:
        del request
        return _json({"object": "list", "data": []}, 200)

    return Starlette(
        routes=[
            Route("/v1/models", models, methods=["GET"]),
            Route("/v1/{endpoint:path}", complete, methods=["POST"]),
        ]
    )


def _json(payload: dict[str, Any], status: int) -> Response:
    return Response(orjson.dumps(payload), status, media_type="application/json")
