"""Response bodies of the OpenAI-compatible API, with vLLM's token-id fields.

Chat responses carry top-level ``prompt_token_ids`` and ``choices[].token_ids`` when
``return_token_ids`` is set, and ``choices[].logprobs.content[k]`` (``token``, ``logprob``,
``bytes``, ``top_logprobs``) when ``logprobs`` is set. Completion responses use the legacy
logprobs shape (``tokens``, ``token_logprobs``, ``top_logprobs``, ``text_offset``) and put
``prompt_token_ids`` on each choice, as vLLM does. Every body has ``policy_version``.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from fulmen.engines.builtin.generation import ChoiceResult
from fulmen.engines.builtin.toolcalls import parse_tool_calls

__all__ = [
    "TokenText",
    "chat_body",
    "chat_chunk",
    "chat_logprob_entries",
    "completion_body",
    "completion_chunk",
    "completion_logprobs",
    "new_id",
]


class TokenText:
    """Decodes single token ids for logprob entries, caching the strings."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self._cache: dict[int, str] = {}

    def __call__(self, token_id: int) -> str:
        """Return the text of one token id."""
        text = self._cache.get(token_id)
        if text is None:
            text = self._tokenizer.decode([token_id])
            self._cache[token_id] = text
        return text


def new_id(prefix: str) -> str:
    """Make a fresh response id such as ``chatcmpl-…``."""
    return f"{prefix}-{uuid.uuid4().hex}"


def _entry(text: TokenText, token_id: int, logprob: float) -> dict[str, Any]:
    token = text(token_id)
    return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8"))}


def chat_logprob_entries(
    text: TokenText, token_ids: list[int], logprobs: list[float], tops: list[Any], top_n: int
) -> list[dict[str, Any]]:
    """``logprobs.content`` entries for the given tokens."""
    entries = []
    for token_id, logprob, top in zip(token_ids, logprobs, tops, strict=True):
        entry = _entry(text, token_id, logprob)
        entry["top_logprobs"] = [_entry(text, t, lp) for t, lp in top[:top_n]]
        entries.append(entry)
    return entries


def _usage(prompt_tokens: int, results: list[ChoiceResult]) -> dict[str, int]:
    completion = sum(len(r.token_ids) for r in results)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": prompt_tokens + completion,
    }


def chat_body(
    *,
    model: str,
    prompt_ids: list[int],
    results: list[ChoiceResult],
    policy_version: int,
    token_ids: bool,
    logprobs: int | None,
    parse_tools: bool,
    text: TokenText,
) -> dict[str, Any]:
    """Build a ``chat.completion`` body; ``logprobs`` is ``None`` or the top-k count."""
    choices = []
    for r in results:
        content, calls = parse_tool_calls(r.text) if parse_tools else (r.text, [])
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
        choice: dict[str, Any] = {
            "index": r.index,
            "message": message,
            "logprobs": None,
            "finish_reason": "tool_calls" if calls else r.finish_reason,
        }
        if logprobs is not None:
            choice["logprobs"] = {
                "content": chat_logprob_entries(text, r.token_ids, r.logprobs, r.top, logprobs)
            }
        if token_ids:
            choice["token_ids"] = r.token_ids
        choices.append(choice)
    body: dict[str, Any] = {
        "id": new_id("chatcmpl"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": _usage(len(prompt_ids), results),
        "policy_version": policy_version,
    }
    if token_ids:
        body["prompt_token_ids"] = prompt_ids
    return body


def chat_chunk(
    response_id: str, model: str, policy_version: int, choice: dict[str, Any]
) -> dict[str, Any]:
    """One ``chat.completion.chunk`` with a single choice."""
    return {
        "id": response_id,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "policy_version": policy_version,
    }


def completion_logprobs(
    text: TokenText,
    token_ids: list[int],
    logprobs: list[float],
    tops: list[Any],
    top_n: int,
    offset: int = 0,
) -> dict[str, Any]:
    """Build the legacy completions ``logprobs`` object."""
    tokens = [text(t) for t in token_ids]
    offsets, pos = [], offset
    for token in tokens:
        offsets.append(pos)
        pos += len(token)
    return {
        "tokens": tokens,
        "token_logprobs": logprobs,
        "top_logprobs": [{text(t): lp for t, lp in top[:top_n]} for top in tops],
        "text_offset": offsets,
    }


def completion_body(
    *,
    model: str,
    prompts: list[list[int]],
    results: list[list[ChoiceResult]],
    policy_version: int,
    token_ids: bool,
    logprobs: int | None,
    text: TokenText,
) -> dict[str, Any]:
    """Build a ``text_completion`` body for one or more prompts (``n`` choices each)."""
    choices = []
    for p, (prompt, per_prompt) in enumerate(zip(prompts, results, strict=True)):
        for r in per_prompt:
            choice: dict[str, Any] = {
                "index": p * len(per_prompt) + r.index,
                "text": r.text,
                "logprobs": None,
                "finish_reason": r.finish_reason,
            }
            if logprobs is not None:
                choice["logprobs"] = completion_logprobs(
                    text, r.token_ids, r.logprobs, r.top, logprobs
                )
            if token_ids:
                choice["token_ids"] = r.token_ids
                choice["prompt_token_ids"] = prompt
            choices.append(choice)
    usage = _usage(sum(len(p) for p in prompts), [r for rs in results for r in rs])
    body: dict[str, Any] = {
        "id": new_id("cmpl"),
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": usage,
        "policy_version": policy_version,
    }
    if token_ids and len(prompts) == 1:
        body["prompt_token_ids"] = prompts[0]
    return body


def completion_chunk(
    response_id: str, model: str, policy_version: int, choice: dict[str, Any]
) -> dict[str, Any]:
    """One streamed ``text_completion`` chunk with a single choice."""
    return {
        "id": response_id,
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "policy_version": policy_version,
    }
