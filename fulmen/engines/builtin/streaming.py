"""Server-sent event streams for chat and text completions.

Each generated token becomes one chunk holding that choice's text delta and, when asked, its
``token_ids`` and ``logprobs``; the chat stream opens each choice with a ``role`` delta and,
when tools were offered, replaces ``<tool_call>`` markup with ``tool_calls`` deltas at the end.
An error after the stream started is sent as an ``{"error": ...}`` event (the status line is
already gone), then ``[DONE]``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from fulmen.engines.builtin.errors import APIError
from fulmen.engines.builtin.generation import Generation
from fulmen.engines.builtin.responses import (
    TokenText,
    chat_chunk,
    chat_logprob_entries,
    completion_chunk,
    completion_logprobs,
    new_id,
)
from fulmen.engines.builtin.toolcalls import ToolCallStreamFilter

__all__ = ["chat_stream", "completion_stream", "sse"]


def sse(data: dict[str, Any] | str) -> bytes:
    """One ``data:`` event."""
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {payload}\n\n".encode()


def _usage_chunk(
    base: dict[str, Any], prompt_tokens: int, completion_tokens: int
) -> dict[str, Any]:
    chunk = dict(base, choices=[])
    chunk["usage"] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    return chunk


async def chat_stream(
    gen: Generation,
    *,
    model: str,
    token_ids: bool,
    logprobs: int | None,
    parse_tools: bool,
    include_usage: bool,
    text: TokenText,
) -> AsyncIterator[bytes]:
    """Yield the SSE body of a streamed chat completion."""
    rid, version = new_id("chatcmpl"), gen.policy_version
    filters = [ToolCallStreamFilter() for _ in range(gen.job.n)]
    generated = 0
    try:
        for index in range(gen.job.n):
            first: dict[str, Any] = {
                "index": index,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": None,
                "finish_reason": None,
            }
            chunk = chat_chunk(rid, model, version, first)
            if token_ids and index == 0:
                chunk["prompt_token_ids"] = gen.prompt_ids
            yield sse(chunk)
        async for ev in gen.events():
            generated += 1
            f = filters[ev.index]
            content = f.feed(ev.text) if parse_tools else ev.text
            delta: dict[str, Any] = {"content": content} if content else {}
            finish = ev.finish_reason
            if finish is not None and parse_tools:
                rest, calls = f.finish()
                if rest:
                    delta["content"] = delta.get("content", "") + rest
                if calls:
                    delta["tool_calls"] = [dict(c, index=i) for i, c in enumerate(calls)]
                    finish = "tool_calls"
            choice: dict[str, Any] = {
                "index": ev.index,
                "delta": delta,
                "logprobs": None,
                "finish_reason": finish,
            }
            if logprobs is not None:
                entries = chat_logprob_entries(
                    text, [ev.token_id], [ev.logprob], [ev.top], logprobs
                )
                choice["logprobs"] = {"content": entries}
            if token_ids:
                choice["token_ids"] = [ev.token_id]
            yield sse(chat_chunk(rid, model, version, choice))
        if include_usage:
            yield sse(
                _usage_chunk(chat_chunk(rid, model, version, {}), len(gen.prompt_ids), generated)
            )
    except APIError as exc:
        yield sse(exc.body())
    yield sse("[DONE]")


async def completion_stream(
    gen: Generation,
    *,
    model: str,
    token_ids: bool,
    logprobs: int | None,
    include_usage: bool,
    text: TokenText,
) -> AsyncIterator[bytes]:
    """Yield the SSE body of a streamed text completion (one prompt)."""
    rid, version = new_id("cmpl"), gen.policy_version
    generated = 0
    offsets = [0] * gen.job.n
    try:
        async for ev in gen.events():
            generated += 1
            choice: dict[str, Any] = {
                "index": ev.index,
                "text": ev.text,
                "logprobs": None,
                "finish_reason": ev.finish_reason,
            }
            if logprobs is not None:
                choice["logprobs"] = completion_logprobs(
                    text, [ev.token_id], [ev.logprob], [ev.top], logprobs, offsets[ev.index]
                )
                offsets[ev.index] += len(ev.text)
            if token_ids:
                choice["token_ids"] = [ev.token_id]
                if generated <= gen.job.n:
                    choice["prompt_token_ids"] = gen.prompt_ids
            yield sse(completion_chunk(rid, model, version, choice))
        if include_usage:
            base = completion_chunk(rid, model, version, {})
            yield sse(_usage_chunk(base, len(gen.prompt_ids), generated))
    except APIError as exc:
        yield sse(exc.body())
    yield sse("[DONE]")
