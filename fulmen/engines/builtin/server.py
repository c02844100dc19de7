"""The built-in OpenAI-compatible server: ``create_app(model)`` returns a Starlette app.

Routes: ``/v1/chat/completions``, ``/v1/completions``, ``/v1/models``, ``/tokenize``,
``/detokenize``, ``/health``, ``/metrics`` (Prometheus text), ``/v1/load_lora_adapter``,
``/v1/unload_lora_adapter`` and ``/v1/reload_weights``. Every response carries the policy
version that produced it, in the body (``policy_version``) and in the
``x-fulmen-policy-version`` header. Errors use OpenAI's
shape ``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from fulmen.asgi_disconnect import CancelOnDisconnect
from fulmen.engines.base import INSTANCE_HEADER
from fulmen.engines.builtin.admin import AdminGate, check_served_path
from fulmen.engines.builtin.batching import ALL_WEIGHTS, Scheduler
from fulmen.engines.builtin.errors import APIError, bad_request
from fulmen.engines.builtin.generation import Generation
from fulmen.engines.builtin.metrics import render_metrics
from fulmen.engines.builtin.model import ServedModel
from fulmen.engines.builtin.prefix_cache import PrefixCache
from fulmen.engines.builtin.protocol import (
    ChatRequest,
    CompletionRequest,
    LoadAdapterRequest,
    ReloadWeightsRequest,
    TokenizeRequest,
    UnloadAdapterRequest,
    parse_request,
    sampling_params,
)
from fulmen.engines.builtin.responses import TokenText, chat_body, completion_body
from fulmen.engines.builtin.streaming import chat_stream, completion_stream

__all__ = ["POLICY_VERSION_HEADER", "create_app"]

logger = logging.getLogger(__name__)

#: Response header naming the policy version (also the body field ``policy_version``).
POLICY_VERSION_HEADER = "x-fulmen-policy-version"


@dataclass
class _Engine:
    model: ServedModel
    scheduler: Scheduler
    text: TokenText
    adapter_roots: tuple[Path, ...] = ()
    instance: str | None = None


def _engine(request: Request) -> _Engine:
    return request.app.state.engine


def _json(body: dict[str, Any], version: int, status: int = 200) -> JSONResponse:
    return JSONResponse(body, status_code=status, headers={POLICY_VERSION_HEADER: str(version)})


async def _body(request: Request) -> Any:
    try:
        return json.loads(await request.body())
    except json.JSONDecodeError as exc:
        raise bad_request(f"request body is not valid JSON: {exc}") from None


def _message_text(content: Any) -> Any:
    if isinstance(content, list):  # OpenAI content parts: keep the text ones
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content


def render_chat(
    model: ServedModel,
    messages: list[dict[str, Any]],
    tools: Any,
    add_generation_prompt: bool,
    kwargs: dict[str, Any] | None,
) -> list[int]:
    """Apply the chat template and tokenize; template errors become 400s."""
    flat = [dict(m, content=_message_text(m.get("content"))) for m in messages]
    try:
        text = model.tokenizer.apply_chat_template(
            flat,
            tools=tools,
            add_generation_prompt=add_generation_prompt,
            tokenize=False,
            **(kwargs or {}),
        )
    except Exception as exc:  # jinja raises many types for malformed messages
        raise bad_request(f"cannot apply the chat template: {exc}", param="messages") from exc
    return model.tokenizer.encode(text, add_special_tokens=False)


def _check_ids(model: ServedModel, ids: list[int], param: str) -> list[int]:
    if not ids:
        raise bad_request("the prompt is empty", param=param)
    vocab = len(model.tokenizer)
    bad = [t for t in ids if not 0 <= t < vocab]
    if bad:
        raise bad_request(f"token id {bad[0]} is out of range [0, {vocab})", param=param)
    return ids


async def chat_completions(request: Request) -> Response:
    """``POST /v1/chat/completions``."""
    e = _engine(request)
    req = parse_request(ChatRequest, await _body(request))
    adapter = e.model.adapter_for(req.model)
    ids = _check_ids(
        e.model,
        render_chat(
            e.model, req.messages, req.tools, req.add_generation_prompt, req.chat_template_kwargs
        ),
        "messages",
    )
    params = sampling_params(req, prompt_len=len(ids), max_model_len=e.model.max_model_len)
    gen = await Generation.start(e.scheduler, ids, params, adapter, req.n)
    top = params.top_logprobs if req.logprobs else None
    parse_tools = bool(req.tools) and req.tool_choice != "none"
    if req.stream:
        usage = bool((req.stream_options or {}).get("include_usage"))
        stream = chat_stream(
            gen,
            model=req.model,
            token_ids=req.return_token_ids,
            logprobs=top,
            parse_tools=parse_tools,
            include_usage=usage,
            text=e.text,
        )
        return StreamingResponse(
            stream,
            media_type="text/event-stream",
            headers={POLICY_VERSION_HEADER: str(gen.policy_version)},
        )
    results = await gen.collect()
    body = chat_body(
        model=req.model,
        prompt_ids=ids,
        results=results,
        policy_version=gen.policy_version,
        token_ids=req.return_token_ids,
        logprobs=top,
        parse_tools=parse_tools,
        text=e.text,
    )
    return _json(body, gen.policy_version)


def _prompts(model: ServedModel, prompt: Any) -> list[list[int]]:
    if isinstance(prompt, str) or (prompt and isinstance(prompt[0], int)):
        prompt = [prompt]
    if not prompt:
        raise bad_request("the prompt is empty", param="prompt")
    return [
        _check_ids(
            model,
            p if isinstance(p, list) else model.tokenizer.encode(p, add_special_tokens=True),
            "prompt",
        )
        for p in prompt
    ]


async def completions(request: Request) -> Response:
    """``POST /v1/completions`` with text or token-id prompts."""
    e = _engine(request)
    req = parse_request(CompletionRequest, await _body(request))
    adapter = e.model.adapter_for(req.model)
    prompts = _prompts(e.model, req.prompt)
    if req.stream and len(prompts) > 1:
        raise bad_request("streaming supports a single prompt", param="prompt")
    params = [
        sampling_params(req, prompt_len=len(p), max_model_len=e.model.max_model_len)
        for p in prompts
    ]
    gens: list[Generation] = []
    try:
        for p, sp in zip(prompts, params, strict=True):
            gens.append(await Generation.start(e.scheduler, p, sp, adapter, req.n))
        top = req.logprobs
        if req.stream:
            usage = bool((req.stream_options or {}).get("include_usage"))
            stream = completion_stream(
                gens[0],
                model=req.model,
                token_ids=req.return_token_ids,
                logprobs=top,
                include_usage=usage,
                text=e.text,
            )
            return StreamingResponse(
                stream,
                media_type="text/event-stream",
                headers={POLICY_VERSION_HEADER: str(gens[0].policy_version)},
            )
        results = await asyncio.gather(*(g.collect() for g in gens))
    except BaseException:
        for g in gens:
            g.job.cancelled = True
        raise
    version = min(g.policy_version for g in gens)
    body = completion_body(
        model=req.model,
        prompts=prompts,
        results=list(results),
        policy_version=version,
        token_ids=req.return_token_ids,
        logprobs=top,
        text=e.text,
    )
    return _json(body, version)


async def models(request: Request) -> Response:
    """``GET /v1/models``: the base model and every loaded adapter."""
    m = _engine(request).model
    created = int(time.time())
    data = [
        {
            "id": m.served_name,
            "object": "model",
            "created": created,
            "owned_by": "fulmen",
            "root": str(m.path),
            "parent": None,
            "max_model_len": m.max_model_len,
        }
    ]
    for info in list(m.adapters.values()):
        data.append(
            {
                "id": info.name,
                "object": "model",
                "created": created,
                "owned_by": "fulmen",
                "root": info.path,
                "parent": m.served_name,
                "max_model_len": m.max_model_len,
                "policy_version": info.version,
            }
        )
    return _json({"object": "list", "data": data}, m.version)


async def tokenize(request: Request) -> Response:
    """``POST /tokenize``: text or chat messages to token ids."""
    m = _engine(request).model
    req = parse_request(TokenizeRequest, await _body(request))
    if req.messages is not None:
        ids = render_chat(m, req.messages, req.tools, req.add_generation_prompt, None)
    elif req.prompt is not None:
        ids = m.tokenizer.encode(req.prompt, add_special_tokens=req.add_special_tokens)
    else:
        raise bad_request("give either prompt or messages", param="prompt")
    return _json({"count": len(ids), "max_model_len": m.max_model_len, "tokens": ids}, m.version)


async def detokenize(request: Request) -> Response:
    """``POST /detokenize``: token ids to text."""
    m = _engine(request).model
    body = await _body(request)
    tokens = body.get("tokens") if isinstance(body, dict) else None
    if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
        raise bad_request("tokens must be a list of token ids", param="tokens")
    text = m.tokenizer.decode(_check_ids(m, tokens, "tokens"))
    return _json({"prompt": text}, m.version)


async def health(request: Request) -> Response:
    """``GET /health``: 200 while the batching thread runs, with the instance id if given."""
    e = _engine(request)
    response = _json(
        {"status": "ok", "policy_version": e.model.version, "running": e.scheduler.running},
        e.model.version,
    )
    if e.instance is not None:
        response.headers[INSTANCE_HEADER] = e.instance
    return response


async def metrics(request: Request) -> Response:
    """``GET /metrics``: queue, batch, token and prefix-cache counters for Prometheus."""
    e = _engine(request)
    text = render_metrics(
        e.scheduler.counters,
        waiting=e.scheduler.waiting,
        running=e.scheduler.running,
        policy_version=e.model.version,
        prefix_cache=e.scheduler.prefix_cache,
        bfloat16=e.model.dtype_name == "bfloat16",
        threads=e.scheduler.threads,
        max_batch=e.scheduler.max_batch,
        kv_tokens=e.scheduler.kv_tokens,
        kv_budget_tokens=e.scheduler.kv_budget_tokens,
        kv_bytes_per_token=e.model.kv_shape.bytes_per_token,
    )
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4; charset=utf-8")


async def _update(request: Request, apply: Any, touches: str, what: dict[str, Any]) -> Response:
    version = await asyncio.wrap_future(_engine(request).scheduler.update(apply, touches=touches))
    logger.info("weights updated to policy version %d: %s", version, what)
    return _json({"status": "ok", "policy_version": version, **what}, version)


async def load_lora_adapter(request: Request) -> Response:
    """``POST /v1/load_lora_adapter`` (vLLM's body); replacing a loaded name is allowed."""
    req = parse_request(LoadAdapterRequest, await _body(request))
    e = _engine(request)
    check_served_path(req.lora_path, e.adapter_roots, param="lora_path")
    m = e.model
    return await _update(
        request,
        lambda: m.load_adapter(req.lora_name, req.lora_path),
        req.lora_name,
        {"lora_name": req.lora_name},
    )


async def unload_lora_adapter(request: Request) -> Response:
    """``POST /v1/unload_lora_adapter``."""
    req = parse_request(UnloadAdapterRequest, await _body(request))
    m = _engine(request).model
    m.adapter_for(req.lora_name)  # 404 now rather than after the drain
    return await _update(
        request,
        lambda: m.unload_adapter(req.lora_name),
        req.lora_name,
        {"lora_name": req.lora_name},
    )


async def reload_weights(request: Request) -> Response:
    """``POST /v1/reload_weights``: copy all base weights from a model directory."""
    req = parse_request(ReloadWeightsRequest, await _body(request) if await request.body() else {})
    e = _engine(request)
    if req.path is not None:
        check_served_path(req.path, e.adapter_roots, param="path")
    m = e.model
    return await _update(
        request, lambda: m.reload_weights(req.path), ALL_WEIGHTS, {"path": req.path or str(m.path)}
    )


async def _api_error(request: Request, exc: Exception) -> Response:
    if not isinstance(exc, APIError):
        logger.exception("unhandled error", exc_info=exc)
        exc = APIError(f"internal error: {exc}", status=500, type="InternalServerError")
    return JSONResponse(exc.body(), status_code=exc.status)


def create_app(
    model: ServedModel,
    *,
    max_batch: int = 8,
    threads: int = 1,
    prefix_cache: PrefixCache | None = None,
    prefill_chunk_tokens: int = 2048,
    kv_budget_tokens: int | None = None,
    admin_token: str | None = None,
    adapter_roots: Sequence[Path] = (),
    instance: str | None = None,
) -> Starlette:
    """Build the ASGI app serving ``model``; the batching thread runs during the lifespan.

    ``prefix_cache`` (``None``: off) lets requests reuse the KV of prompt prefixes computed
    before; ``prefill_chunk_tokens`` and ``kv_budget_tokens`` are the
    :class:`~fulmen.engines.builtin.batching.Scheduler`'s. ``admin_token`` (``None``: none
    asked) guards the routes that change the served weights, and ``adapter_roots`` (empty:
    anywhere) the folders they load from (``fulmen.engines.builtin.admin``). ``instance``
    (``None``: none) is echoed in ``/health``'s ``x-fulmen-instance`` header, so the launcher
    that started this server knows it from another on the same port. A request whose client
    leaves before its reply starts is cancelled with its generation (``fulmen.asgi_disconnect``).
    """
    scheduler = Scheduler(
        model,
        max_batch=max_batch,
        threads=threads,
        prefix_cache=prefix_cache,
        prefill_chunk_tokens=prefill_chunk_tokens,
        kv_budget_tokens=kv_budget_tokens,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        scheduler.start()
        try:
            yield
        finally:
            await asyncio.to_thread(scheduler.close)

    routes = [
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/tokenize", tokenize, methods=["POST"]),
        Route("/detokenize", detokenize, methods=["POST"]),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/v1/load_lora_adapter", load_lora_adapter, methods=["POST"]),
        Route("/v1/unload_lora_adapter", unload_lora_adapter, methods=["POST"]),
        Route("/v1/reload_weights", reload_weights, methods=["POST"]),
    ]
    middleware = [Middleware(CancelOnDisconnect)]
    if admin_token is not None:
        middleware.insert(0, Middleware(AdminGate, token=admin_token))
    app = Starlette(
        routes=routes,
        middleware=middleware,
        lifespan=lifespan,
        exception_handlers={APIError: _api_error, Exception: _api_error},
    )
    roots = tuple(Path(os.path.realpath(root)) for root in adapter_roots)
    app.state.engine = _Engine(model, scheduler, TokenText(model.tokenizer), roots, instance)
    return app
