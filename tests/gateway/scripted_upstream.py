"""A real OpenAI-compatible HTTP server with scripted replies, shaped like vLLM's.

Modes:
  ``vllm``           returns ``prompt_token_ids``, ``choices[].token_ids`` when asked with
                     ``return_token_ids``, chat logprobs as ``logprobs.content[k].logprob``,
                     completion logprobs as ``token_logprobs``, token ids in stream chunks, a
                     ``policy_version`` field and an ``x-policy-version`` header.
  ``hosted``         like a hosted API: ignores ``return_token_ids``, never returns token ids.
  ``hosted_strict``  like OpenAI itself: rejects ``return_token_ids`` with a 400.

The tokenizer is one token per character (``id = ord(c)``), so ids are deterministic and a
chat prompt extends the previous prompt + completion token-exactly. Logprobs are a fixed
function of token and position. Replies come from ``Script.reply_for(request body)`` when it is
set, else from ``Script.replies`` in order, then ``Script.default_content``.

Run standalone (the benchmark does): ``python tests/gateway/scripted_upstream.py --port 8011``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

__all__ = ["Reply", "Script", "create_upstream_app", "serve_app"]


@dataclass
class Reply:
    """One scripted answer: text, or tool calls ``[(name, arguments), ...]``."""

    content: str | None = None
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    delay_s: float = 0.0


@dataclass
class Script:
    """How the server behaves, and what it received (for assertions)."""

    mode: str = "vllm"
    model: str = "tiny-model"
    replies: deque[Reply] = field(default_factory=deque)
    default_content: str = "ok"
    delay_s: float = 0.0
    policy_version: str | None = "policy-7"
    is_policy_version_in_body: bool = True
    break_stream_after: int | None = None  # chunks sent before the connection is dropped
    chunk_delay_s: float = 0.0  # pause between streamed chunks
    stream_chunk_chars: int = 4
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    is_recording: bool = True
    # Answers from the request itself (say, right only when the prompt shows some example).
    reply_for: Callable[[dict[str, Any]], Reply] | None = None

    def next_reply(self, body: dict[str, Any] | None = None) -> Reply:
        if self.reply_for is not None and body is not None:
            return self.reply_for(body)
        return self.replies.popleft() if self.replies else Reply(content=self.default_content)


def logprob_of(token_id: int, position: int) -> float:
    """The scripted logprob of ``token_id`` at ``position`` (deterministic, negative)."""
    return -round(((token_id * 31 + position) % 97) / 50 + 0.01, 4)


def encode(text: str) -> list[int]:
    return [ord(c) for c in text]


def _is_message(message: Any) -> bool:
    if not isinstance(message, dict):
        return False
    content, calls = message.get("content"), message.get("tool_calls")
    return (content is None or isinstance(content, str | list)) and (
        calls is None or (isinstance(calls, list) and all(isinstance(c, dict) for c in calls))
    )


def render_chat(messages: list[dict[str, Any]]) -> str:
    parts = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        text = content or ""
        for call in message.get("tool_calls") or []:
            fn = call.get("function", {})
            text += f"<tool_call>{fn.get('name')}:{fn.get('arguments')}</tool_call>"
        parts.append(f"<|{message.get('role')}|>{text}\n")
    return "".join(parts) + "<|assistant|>"


def _generated_text(reply: Reply) -> str:
    if reply.tool_calls:
        return "".join(
            f"<tool_call>{name}:{json.dumps(args, sort_keys=True)}</tool_call>"
            for name, args in reply.tool_calls
        )
    return reply.content or ""


def _tool_calls(reply: Reply) -> list[dict[str, Any]]:
    # Unique ids, as a real engine gives: the OpenAI Agents SDK refuses an id an earlier turn used.
    tag = uuid.uuid4().hex[:8]
    return [
        {
            "id": f"call_{i}_{name}_{tag}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, sort_keys=True)},
        }
        for i, (name, args) in enumerate(reply.tool_calls)
    ]


def _chat_logprobs(ids: list[int], start: int = 0) -> dict[str, Any]:
    return {
        "content": [
            {
                "token": chr(t),
                "logprob": logprob_of(t, start + k),
                "bytes": list(chr(t).encode()),
                "top_logprobs": [],
            }
            for k, t in enumerate(ids)
        ]
    }


def _completion_logprobs(ids: list[int], start: int = 0) -> dict[str, Any]:
    return {
        "tokens": [chr(t) for t in ids],
        "token_logprobs": [logprob_of(t, start + k) for k, t in enumerate(ids)],
        "top_logprobs": [{chr(t): logprob_of(t, start + k)} for k, t in enumerate(ids)],
        "text_offset": list(range(start, start + len(ids))),
    }


def _error(status: int, message: str) -> Response:
    body = {
        "error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}
    }
    return Response(orjson.dumps(body), status, media_type="application/json")


class _Upstream:
    def __init__(self, script: Script) -> None:
        self.script = script

    @property
    def token_level(self) -> bool:
        return self.script.mode == "vllm"

    def headers(self) -> dict[str, str]:
        if self.token_level and self.script.policy_version is not None:
            return {"x-policy-version": self.script.policy_version}
        return {}

    async def receive(self, request: Request) -> dict[str, Any] | Response:
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError:
            return _error(400, "invalid JSON")
        if self.script.is_recording:
            self.script.requests.append(body)
            self.script.headers.append(dict(request.headers))
        if self.script.mode == "hosted_strict" and "return_token_ids" in body:
            return _error(400, "Unrecognized request argument supplied: return_token_ids")
        return body

    async def models(self, request: Request) -> Response:
        del request
        data = {
            "object": "list",
            "data": [
                {
                    "id": self.script.model,
                    "object": "model",
                    "created": 0,
                    "owned_by": "fulmen-tests",
                }
            ],
        }
        return Response(orjson.dumps(data), media_type="application/json")

    async def chat(self, request: Request) -> Response:
        body = await self.receive(request)
        if isinstance(body, Response):
            return body
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return _error(400, "messages must be a non-empty list")
        if not all(_is_message(m) for m in messages):
            # As vLLM does: a malformed message is the client's error, never a crash.
            return _error(400, "each message must be an object with string or list content")
        reply = self.script.next_reply(body)
        await asyncio.sleep(reply.delay_s or self.script.delay_s)
        prompt_ids = encode(render_chat(messages))
        ids = encode(_generated_text(reply))
        finish = "tool_calls" if reply.tool_calls else "stop"
        max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
        if isinstance(max_tokens, int) and len(ids) > max_tokens and not reply.tool_calls:
            ids, finish = ids[:max_tokens], "length"
        if body.get("stream"):
            return self._chat_stream(body, reply, prompt_ids, ids, finish)
        want_ids = self.token_level and bool(body.get("return_token_ids"))
        message: dict[str, Any] = {"role": "assistant", "content": None}
        if reply.tool_calls:
            message["tool_calls"] = _tool_calls(reply)
        else:
            message["content"] = "".join(chr(t) for t in ids)
        choice: dict[str, Any] = {
            "index": 0,
            "message": message,
            "logprobs": _chat_logprobs(ids) if body.get("logprobs") else None,
            "finish_reason": finish,
        }
        if want_ids:
            choice["token_ids"] = ids
        out = self._top(body, "chat.completion", prompt_ids if want_ids else None)
        out["choices"] = [choice]
        out["usage"] = _usage(len(prompt_ids), len(ids))
        return Response(orjson.dumps(out), media_type="application/json", headers=self.headers())

    def _top(self, body: dict[str, Any], kind: str, prompt_ids: list[int] | None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}"
            if kind.startswith("chat")
            else f"cmpl-{uuid.uuid4().hex[:12]}",
            "object": kind,
            "created": int(time.time()),
            "model": body.get("model") or self.script.model,
        }
        if prompt_ids is not None:
            out["prompt_token_ids"] = prompt_ids
        if self.token_level and self.script.is_policy_version_in_body:
            out["policy_version"] = self.script.policy_version
        return out

    def _chat_stream(
        self,
        body: dict[str, Any],
        reply: Reply,
        prompt_ids: list[int],
        ids: list[int],
        finish: str,
    ) -> Response:
        want_ids = self.token_level and bool(body.get("return_token_ids"))
        want_logprobs = bool(body.get("logprobs"))
        options = body.get("stream_options") or {}
        top = self._top(body, "chat.completion.chunk", None)
        top.pop("policy_version", None)
        n = self.script.stream_chunk_chars
        pieces = [ids[i : i + n] for i in range(0, len(ids), n)] or [[]]
        calls = _tool_calls(reply)

        def chunk(choice: dict[str, Any], **extra: Any) -> bytes:
            return b"data: " + orjson.dumps({**top, **extra, "choices": [choice]}) + b"\n\n"

        async def events() -> AsyncIterator[bytes]:
            first: dict[str, Any] = {
                "index": 0,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": None,
                "finish_reason": None,
            }
            extra = {"prompt_token_ids": prompt_ids} if want_ids else {}
            if self.token_level and self.script.is_policy_version_in_body:
                extra["policy_version"] = self.script.policy_version
            yield chunk(first, **extra)
            position = 0
            for k, piece in enumerate(pieces):
                if k == self.script.break_stream_after:
                    raise RuntimeError("scripted upstream: stream broken on purpose")
                delta: dict[str, Any]
                if calls:
                    delta = {"tool_calls": _stream_tool_delta(calls, k, len(pieces))}
                else:
                    delta = {"content": "".join(chr(t) for t in piece)}
                is_last = k == len(pieces) - 1
                choice: dict[str, Any] = {
                    "index": 0,
                    "delta": delta,
                    "logprobs": _chat_logprobs(piece, position) if want_logprobs else None,
                    "finish_reason": finish if is_last else None,
                }
                if want_ids:
                    choice["token_ids"] = piece
                position += len(piece)
                yield chunk(choice)
                await asyncio.sleep(self.script.chunk_delay_s)
            if options.get("include_usage"):
                usage = {**top, "choices": [], "usage": _usage(len(prompt_ids), len(ids))}
                yield b"data: " + orjson.dumps(usage) + b"\n\n"
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream", headers=self.headers())

    async def completions(self, request: Request) -> Response:
        body = await self.receive(request)
        if isinstance(body, Response):
            return body
        prompts = _prompts(body.get("prompt"))
        if prompts is None:
            return _error(400, "prompt must be a string, a list of ids, or a list of those")
        reply = self.script.next_reply()
        await asyncio.sleep(reply.delay_s or self.script.delay_s)
        ids = encode(reply.content or "")
        max_tokens = body.get("max_tokens", 16)
        finish = "stop"
        if isinstance(max_tokens, int) and len(ids) > max_tokens:
            ids, finish = ids[:max_tokens], "length"
        want_ids = self.token_level and bool(body.get("return_token_ids"))
        logprobs = body.get("logprobs")
        choices = []
        for index, prompt_ids in enumerate(prompts):
            choice: dict[str, Any] = {
                "index": index,
                "text": "".join(chr(t) for t in ids),
                "logprobs": _completion_logprobs(ids) if logprobs is not None else None,
                "finish_reason": finish,
            }
            if want_ids:
                choice["prompt_token_ids"] = prompt_ids
                choice["token_ids"] = ids
            choices.append(choice)
        if body.get("stream"):
            return self._completion_stream(body, choices)
        out = self._top(body, "text_completion", None)
        out["choices"] = choices
        out["usage"] = _usage(sum(len(p) for p in prompts), len(ids) * len(prompts))
        return Response(orjson.dumps(out), media_type="application/json", headers=self.headers())

    def _completion_stream(self, body: dict[str, Any], choices: list[dict[str, Any]]) -> Response:
        top = self._top(body, "text_completion", None)
        n = self.script.stream_chunk_chars

        async def events() -> AsyncIterator[bytes]:
            for choice in choices:
                text = choice["text"]
                ids = choice.get("token_ids")
                for start in range(0, max(len(text), 1), n):
                    piece: dict[str, Any] = {
                        "index": choice["index"],
                        "text": text[start : start + n],
                        "finish_reason": None,
                        "logprobs": None,
                    }
                    piece_ids = encode(text[start : start + n])
                    if choice.get("logprobs") is not None:
                        piece["logprobs"] = _completion_logprobs(piece_ids, start)
                    if ids is not None:
                        piece["token_ids"] = piece_ids
                        if start == 0:
                            piece["prompt_token_ids"] = choice["prompt_token_ids"]
                    if start + n >= len(text):
                        piece["finish_reason"] = choice["finish_reason"]
                    yield b"data: " + orjson.dumps({**top, "choices": [piece]}) + b"\n\n"
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream", headers=self.headers())


def _stream_tool_delta(calls: list[dict[str, Any]], k: int, pieces: int) -> list[dict[str, Any]]:
    # First chunk names every call; the arguments are spread over the remaining chunks.
    if k == 0:
        return [
            {
                "index": i,
                "id": c["id"],
                "type": "function",
                "function": {"name": c["function"]["name"], "arguments": ""},
            }
            for i, c in enumerate(calls)
        ]
    out = []
    for i, c in enumerate(calls):
        args = c["function"]["arguments"]
        size = -(-len(args) // max(pieces - 1, 1))
        part = args[(k - 1) * size : k * size]
        if part:
            out.append({"index": i, "function": {"arguments": part}})
    return out


def _prompts(prompt: Any) -> list[list[int]] | None:
    if isinstance(prompt, str):
        return [encode(prompt)]
    if isinstance(prompt, list) and prompt and all(type(t) is int for t in prompt):
        return [prompt]
    if isinstance(prompt, list) and prompt:
        out = []
        for p in prompt:
            if isinstance(p, str):
                out.append(encode(p))
            elif isinstance(p, list) and all(type(t) is int for t in p):
                out.append(p)
            else:
                return None
        return out
    return None


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def create_upstream_app(script: Script) -> Starlette:
    """The scripted server as an ASGI app."""
    upstream = _Upstream(script)
    return Starlette(
        routes=[
            Route("/v1/models", upstream.models, methods=["GET"]),
            Route("/v1/chat/completions", upstream.chat, methods=["POST"]),
            Route("/v1/completions", upstream.completions, methods=["POST"]),
        ]
    )


def free_socket() -> socket.socket:
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY on accepted connections only then, and
    # without it small replies can wait ~40 ms for delayed ACKs.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@contextlib.asynccontextmanager
async def serve_app(app: Any) -> AsyncIterator[str]:
    """Serve ``app`` with uvicorn on 127.0.0.1 (free port) in this loop; yields its URL."""
    sock = free_socket()
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app, log_level="warning", lifespan="on", ws="none", timeout_graceful_shutdown=5
    )
    server = uvicorn.Server(config)
    # capture_signals would swap the test process's signal handlers; not wanted here.
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign]
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        for _ in range(500):
            if server.started or task.done():
                break
            await asyncio.sleep(0.01)
        if not server.started:
            raise RuntimeError("server did not start")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, timeout=10)
        sock.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--port", type=int)
    # A socket the caller bound and passed on (pass_fds): no other process can take its port
    # between the caller picking it and this server binding it.
    where.add_argument("--fd", type=int, help="listen on this inherited, bound socket")
    parser.add_argument("--mode", default="vllm", choices=["vllm", "hosted", "hosted_strict"])
    parser.add_argument("--content", default="ok")
    parser.add_argument("--delay-s", type=float, default=0.0, help="wait before each reply")
    args = parser.parse_args()
    script = Script(
        mode=args.mode, default_content=args.content, is_recording=False, delay_s=args.delay_s
    )
    config = uvicorn.Config(
        create_upstream_app(script),
        host="127.0.0.1",
        port=args.port or 0,
        log_level="warning",
        ws="none",
        access_log=False,
    )
    sockets = None if args.fd is None else [socket.socket(fileno=args.fd)]
    uvicorn.Server(config).run(sockets=sockets)


if __name__ == "__main__":
    main()
