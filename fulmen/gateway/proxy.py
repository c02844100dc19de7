"""The gateway's core: one object that forwards a call, shows the agent its reply, records it.

``Gateway`` owns the engine pool, the forwarder, the context resolver and the recorder. Its
``handle`` runs one request end to end. The raw exchange is queued before the agent gets the
last byte (so ``flush`` after a reply always covers it); the record is built and validated by
the recorder's background task, off the request path.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import anyio
import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from fulmen.errors import FulmenError
from fulmen.gateway.capture import (
    Asked,
    Exchange,
    agent_chunk,
    agent_view,
    prepare_request,
)
from fulmen.gateway.config import GatewayConfig
from fulmen.gateway.context import CallContext, ContextResolver
from fulmen.gateway.errors import (
    NotModelPath,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from fulmen.gateway.errors import openai_error_body as error_body
from fulmen.gateway.forward import HOP_HEADERS, Forwarder, UpstreamReply
from fulmen.gateway.http1 import Http1Client
from fulmen.gateway.notes import CallNotes
from fulmen.gateway.paths import is_model_path
from fulmen.gateway.plan import CallPlan
from fulmen.gateway.recorder import CallRecorder, FlushOutcome
from fulmen.gateway.redaction import Redactor
from fulmen.gateway.release import ReleaseRouter
from fulmen.gateway.request_reading import agent_name, read_body, session_headers
from fulmen.gateway.seeds import CallSeeds
from fulmen.gateway.sessions import SessionCapture
from fulmen.gateway.streaming import SSEDecoder, StreamAccumulator, event_data
from fulmen.gateway.upstream_client import UpstreamClientFactory
from fulmen.gateway.upstreams import Upstream, UpstreamPool
from fulmen.store.base import Store
from fulmen.types.behaviour import refused_field, reshaped_fields
from fulmen.types.records import AGENT_NAME_HEADER
from fulmen.types.releases import ReleaseArm
from fulmen.wire.api import WireApi
from fulmen.wire.errors import BadRequest
from fulmen.wire.json_values import as_object, nests_deeper_than
from fulmen.wire.openai import TOKEN_ENDPOINTS
from fulmen.wire.table import key_headers, wire_api
from fulmen.wire.translation import EventStream

__all__ = ["Gateway"]

#: The deepest nesting of arrays and objects a request body may have (a tool's JSON schema
#: nests a few levels; recording wraps the body in a few more, under the encoder's 254).
MAX_BODY_DEPTH = 64

_log = logging.getLogger(__name__)


class Gateway:
    """The parts of one gateway and the request handling that uses them.

    Args:
        store: where call records go and rollouts are looked up.
        upstreams: the engines to forward to.
        token: when set, agents must send it as their API key, and it is not sent upstream.
        config: timeouts, caches and batching.
        clock: monotonic seconds for production sessions' timeouts and rate limits
            (injectable: tests move time instead of sleeping).
    """

    def __init__(
        self,
        store: Store,
        upstreams: Sequence[Upstream],
        *,
        token: str | None = None,
        config: GatewayConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
        upstream_client: UpstreamClientFactory = Http1Client,
    ) -> None:
        self.config = config or GatewayConfig()
        self.token = token
        self.pool = UpstreamPool(upstreams, unhealthy_s=self.config.unhealthy_s)
        self.resolver = ContextResolver(store, attempt_ttl_s=self.config.attempt_ttl_s)
        redaction = self.config.redaction
        self.redactor = Redactor(redaction) if redaction is not None else None
        self.recorder = CallRecorder(
            store,
            batch_size=self.config.batch_size,
            flush_interval_s=self.config.flush_interval_s,
            max_pending=self.config.max_pending,
            close_timeout_s=self.config.close_timeout_s,
            spill_dir=self.config.spill_dir,
            redact=self.redactor.call if self.redactor is not None else None,
        )
        self.capture: SessionCapture | None = None
        if self.config.capture is not None:
            self.capture = SessionCapture(
                self.config.capture,
                store=store,
                recorder=self.recorder,
                worker_id=f"gateway@{socket.gethostname()}"[:128],
                flush_timeout_s=self.config.flush_timeout_s,
                close_timeout_s=self.config.close_timeout_s,
                clock=clock,
            )
        self.release: ReleaseRouter | None = None
        if self.config.release is not None:
            engines = [u.base_url for u in upstreams if u.is_token_level]
            keys = {u.base_url: u.api_key for u in upstreams if u.api_key is not None}
            self.release = ReleaseRouter(self.config.release, store, engines, engine_keys=keys)
        self.forwarder = Forwarder(self.pool, self.config, upstream_client)
        self.seeds = CallSeeds()
        # Requests refused at the trust boundary, by reason (``/metrics``): an attempt's key
        # used outside its attempt, a path that is not a model API path.
        self.refusals: Counter[str] = Counter()
        # Calls in flight per rollout (``max_calls_per_rollout``), until their reply ends.
        self.rollout_calls: Counter[str] = Counter()
        self._is_started = False
        self.notes = CallNotes()

    def start(self) -> None:
        """Start background recording (idempotent; needs the serving event loop)."""
        if not self._is_started:
            self._is_started = True
            self.recorder.start()
            if self.capture is not None:
                self.capture.start()
            if self.release is not None:
                self.release.start()

    async def ready(self, timeout: float = 60.0) -> None:
        """Wait (up to ``timeout``) until a release's state is read before serving traffic.

        Raises the ``ConfigError`` that keeps a configured release from being served.
        """
        if self.release is not None and not await self.release.ready(timeout):
            _log.warning(
                "release %r not read from the store in %.0f s: serving it as a canary until it is",
                self.release.name,
                timeout,
            )

    async def flush(self, timeout: float | None = None) -> FlushOutcome:
        """Wait until every call answered so far is in the store; say what was not stored."""
        self.start()
        return await self.recorder.flush(timeout)

    async def aclose(self) -> None:
        """Write open sessions and every pending record, then close upstream connections."""
        if self.release is not None:
            await self.release.aclose()
        if self.capture is not None:
            await self.capture.aclose()
        await self.recorder.aclose()
        await self.forwarder.aclose()

    async def handle(self, request: Request, endpoint: str, ctx: CallContext | None) -> Response:
        """Forward ``request`` for ``endpoint`` (the path below ``/v1``) and record it."""
        self.start()
        # A wire API's POST endpoint is a model call and gets a record (an alias, such as an
        # Anthropic client's doubled ``v1/messages``, means its endpoint); other allowed paths
        # are forwarded unrecorded.
        api = wire_api(endpoint)
        endpoint = endpoint if api is None else api.endpoint
        if not is_model_path(request.method, endpoint):
            self.refusals["not_model_path"] += 1
            raise NotModelPath(
                f"{request.method} /v1/{endpoint} is not a model API path the gateway forwards"
            )
        if request.method != "POST" or api is None:
            return await self._pass_through(request, endpoint, ctx)
        body = await self._json_body(request)
        call = _Call(self, request, self.plan(request, api, ctx, body), ctx, body)
        try:
            self._check_choices(body, ctx)
            call.check_behaviour()
            reply = await call.send()
        except FulmenError as exc:
            payload = error_body(exc)
            call.finish(None, error=payload["error"])
            shown = api.error_body(exc.http_status, payload)
            return _json_response(shown, exc.http_status)
        content_type = reply.header("content-type") or ""
        if body.get("stream") and content_type.startswith("text/event-stream"):
            return call.stream(reply)
        return await call.whole(reply)

    def plan(
        self, request: Request, api: WireApi, ctx: CallContext | None, body: dict[str, Any]
    ) -> CallPlan:
        """Decide how to serve one model call of ``api`` (see ``fulmen.gateway.plan``).

        Counts the call on its release arm and notes the agent's fields a rollout replaces.
        """
        # 128 random bits, as a uuid4 has (a quarter of its CPU: this runs once per call).
        call_id = f"call-{os.urandom(16).hex()}"
        name = agent_name(request)
        model = self.config.engine_model(body.get("model"))
        session_id: str | None = None
        arm: ReleaseArm | None = None
        if ctx is None and self.capture is not None:
            # A production call of a canary release goes to its session's arm.
            session_id = self.capture.session_of(request.headers, body)
            if self.release is not None:
                arm = self.release.arm_of(session_id if session_id is not None else call_id)
                model = self.release.model_of(arm)
                self.release.calls[arm] += 1
        overrides = ctx.overrides(model, name) if ctx else {}
        if ctx is not None:
            self.notes.replaced(ctx, body, overrides)
        if model != body.get("model"):
            overrides = {"model": model, **overrides}
        translation = api.translation(body)
        return CallPlan(
            call_id=call_id,
            api=api,
            agent_name=name,
            model=model,
            overrides=overrides,
            # A seeded rollout's call: the seed replaces the agent's own (a fixed agent seed
            # would give every member of a group the same sample).
            seed=self.seeds.seed_for(ctx, body),
            # A Responses or Messages call for a token-level engine travels as a chat completion.
            translation=translation if translation is not None and self.translates(ctx) else None,
            session_id=session_id,
            arm=arm,
        )

    def _check_choices(self, body: dict[str, Any], ctx: CallContext | None) -> None:
        """Refuse a rollout's call that asks for more than ``max_n`` choices (engine work)."""
        n = body.get("n")
        if ctx is not None and isinstance(n, int) and n > self.config.max_n:
            self.refusals["too_many_choices"] += 1
            raise BadRequest(
                f"n={n} asks for more choices than a rollout's call may (gateway max_n: "
                f"{self.config.max_n})",
                detail={"param": "n"},
            )

    async def _json_body(self, request: Request) -> dict[str, Any]:
        raw = await read_body(request, self.config.max_body_bytes)
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise BadRequest(f"request body is not valid JSON: {exc}") from exc
        fields = as_object(body)
        if fields is None:
            raise BadRequest(f"request body must be a JSON object, got {type(body).__name__}")
        if nests_deeper_than(fields, MAX_BODY_DEPTH):
            # Recorded, translated and seeded, the body is written again: refuse it here
            # rather than fail there (the JSON encoder writes at most 254 levels).
            raise BadRequest(
                f"request body nests arrays or objects more than {MAX_BODY_DEPTH} levels deep"
            )
        return fields

    async def _pass_through(
        self, request: Request, endpoint: str, ctx: CallContext | None
    ) -> Response:
        raw = await read_body(request, self.config.max_body_bytes)
        reply = await self.forwarder.send(
            request.method,
            endpoint,
            rollout_id=ctx.rollout_id if ctx else None,
            headers=self.forward_headers(request),
            agent_auth=self.agent_auth(request),
            body_for=lambda _u: raw or None,
            query=request.scope["query_string"],
        )
        try:
            content = await reply.read()
        finally:
            await reply.aclose()
        return Response(content, reply.status_code, headers=reply.headers())

    def agent_auth(self, request: Request) -> str | None:
        """Return the Authorization header to forward upstream (none with a gateway token)."""
        # With a gateway token the agent's bearer is that token: never leak it upstream.
        return None if self.token is not None else request.headers.get("authorization")

    def forward_headers(self, request: Request) -> dict[str, str]:
        """Return the agent's headers to send upstream (its key only without a gateway token)."""
        # With a token, an API's own key header carries that token (or an attempt's key).
        skipped = key_headers() if self.token is not None else frozenset[str]()
        return {
            k: v
            for k, v in request.headers.items()
            if k not in HOP_HEADERS and k != AGENT_NAME_HEADER and k not in skipped
        }

    def translates(self, ctx: CallContext | None) -> bool:
        """Whether a Responses or Messages call goes to the engine as a chat completion.

        It does when the engine the call would go to first returns token ids; a hosted API
        gets the call as it is (see ``fulmen.wire.translation``).
        """
        first = self.pool.ranked(ctx.rollout_id if ctx else None)[0]
        return self.pool.is_token_level(first)

    def record(self, exchange: Exchange, *, session_id: str | None = None) -> None:
        """Queue ``exchange`` for recording; the recorder builds the record in the background.

        With ``capture`` configured, an untracked call goes to its production session
        (``session_id``, read from the request) instead.
        """
        if exchange.rollout_id is None and self.capture is not None:
            self.capture.add(exchange, session_id)
        elif exchange.rollout_id is not None or self.config.record_untracked:
            self.recorder.record(exchange)


class _Call:
    """One model call in flight: its plan, the engine it went to, its timing and its record."""

    def __init__(
        self,
        gateway: Gateway,
        request: Request,
        plan: CallPlan,
        ctx: CallContext | None,
        body: dict[str, Any],
    ) -> None:
        self.gateway = gateway
        self.request = request
        self.plan = plan
        self.api = plan.api
        self.call_id = plan.call_id
        self.translation = plan.translation
        self.engine_endpoint = plan.engine_endpoint
        self.ctx = ctx
        self.body = body
        self.started_at = time.time()
        self._t0 = time.perf_counter()
        self.upstream: Upstream | None = None
        self._prepared: dict[bool, bytes] = {}
        self.asked = Asked()
        self._engine_body: dict[str, Any] | None = None

    def check_behaviour(self) -> None:
        """Refuse a call of a behaviour mode that constrains decoding; note forced fields.

        Raises ``BadRequest`` naming the field (``fulmen.types.behaviour.CONSTRAINT_FIELDS``).
        """
        ctx = self.ctx
        if ctx is None or not ctx.samples_behaviour(self.plan.model):
            return
        fields = self.body if self.translation is None else self.translation.behaviour_fields()
        refused = refused_field(fields)
        if refused is not None:
            raise BadRequest(
                f"{refused} constrains decoding, which a training rollout may not: its tokens "
                "must come from the policy the trainer corrects for "
                "(docs/behaviour-policy.md); leave it out of training calls",
                detail={"param": refused},
            )
        reshaped = reshaped_fields(fields)
        if reshaped:
            shown = [f"{name}={fields[name]!r}" for name in reshaped]
            self.gateway.notes.forced(ctx.rollout_id, shown)

    def _body_for(self, upstream: Upstream) -> bytes:
        level = self.gateway.pool.is_token_level(upstream)
        prepared = self._prepared.get(level)
        if prepared is None:
            if self._engine_body is None:
                self._engine_body = self._translated_body()
            overrides = self.plan.overrides
            seed = self.plan.seed
            if level and seed is not None and self.engine_endpoint in TOKEN_ENDPOINTS:
                # Only fulmen's engines get it: a hosted API may not know ``seed``.
                overrides = {**overrides, "seed": seed}
            body, self.asked = prepare_request(
                self._engine_body,
                endpoint=self.engine_endpoint,
                overrides=overrides,
                is_token_level=level,
            )
            prepared = self._prepared[level] = orjson.dumps(body)
        return prepared

    def _translated_body(self) -> dict[str, Any]:
        if self.translation is None:
            return self.body
        chat = self.translation.chat()
        if chat.dropped_tools:
            self.gateway.notes.dropped_tools(chat.dropped_tools)
        return chat.request

    async def send(self) -> UpstreamReply:
        """Open the engine's reply to this call (resent as text to an engine refusing ids)."""
        gateway = self.gateway
        reply = await gateway.forwarder.send(
            "POST",
            self.engine_endpoint,
            rollout_id=self.ctx.rollout_id if self.ctx else None,
            headers=gateway.forward_headers(self.request),
            agent_auth=gateway.agent_auth(self.request),
            body_for=self._body_for,
            # The agent's query string belongs to its own API (``?beta=true``), not the chat one.
            query=b"" if self.translation is not None else self.request.scope["query_string"],
        )
        if reply.status_code == 400 and gateway.pool.is_token_level(reply.upstream):
            # A hosted API that rejects ``return_token_ids``: remember it, resend as text.
            content = await reply.read()
            if b"return_token_ids" in content:
                await reply.aclose()
                gateway.pool.mark_text_only(reply.upstream)
                _log.warning("upstream %s rejects token ids: text only", reply.upstream.base_url)
                return await self.send()
            # Not that error: the body stays cached in the reply for the caller to read.
        self.upstream = reply.upstream
        return reply

    def finish(
        self,
        response: dict[str, Any] | None,
        *,
        error: dict[str, Any] | None = None,
        policy_version: str | None = None,
        shown: dict[str, Any] | None = None,
    ) -> None:
        """Queue the call's record (``shown``: the reply as the agent got it, if it differs)."""
        ctx, plan = self.ctx, self.plan
        release = self.gateway.release
        self.gateway.record(
            Exchange(
                call_id=self.call_id,
                rollout_id=ctx.rollout_id if ctx else None,
                attempt_id=ctx.attempt_id if ctx else None,
                endpoint=plan.endpoint,
                request=self.body,
                response=response,
                upstream=self.upstream.base_url if self.upstream else None,
                is_stream=bool(self.body.get("stream")),
                started_at=self.started_at,
                latency_s=time.perf_counter() - self._t0,
                error=error,
                policy_version=policy_version,
                shown=shown,
                agent_name=plan.agent_name,
                engine_endpoint=self.engine_endpoint if self.translation is not None else None,
                client_headers=session_headers(self.request, self.gateway.config.session_headers),
                release=release.name if release is not None and plan.arm is not None else None,
                arm=plan.arm,
            ),
            session_id=plan.session_id,
        )

    def view(self, response: dict[str, Any]) -> dict[str, Any]:
        """Return the successful engine reply ``response`` as the agent gets it."""
        if self.translation is not None:
            return self.translation.reply(response)
        return agent_view(response, self.asked)

    def _policy_version(self, reply: UpstreamReply) -> str | None:
        for name in self.gateway.config.policy_version_headers:
            value = reply.header(name)
            if value is not None:
                return value
        return None

    async def whole(self, reply: UpstreamReply) -> Response:
        """Read a whole reply, queue its record, and give the agent its view of it."""
        try:
            content = await reply.read()
        except FulmenError as exc:
            payload = error_body(exc)
            self.finish(None, error=payload["error"])
            return _json_response(self.api.error_body(exc.http_status, payload), exc.http_status)
        finally:
            await reply.aclose()
        headers = reply.headers()
        headers["x-fulmen-call-id"] = self.call_id
        data = _loads_object(content)
        if data is None:  # not JSON: pass it on, record what it was
            error = {"message": content[:2000].decode(errors="replace"), "type": "upstream_error"}
            self.finish(None, error=error)
            return Response(content, reply.status_code, headers=headers)
        error = _error_of(data) if reply.status_code >= 400 else None
        if error is None:
            view = self.view(data)
        elif self.translation is not None:
            view = self.translation.error_reply(reply.status_code, data)
        else:
            view = data
        # Queued before the reply leaves, so a flush after the reply always includes it.
        self.finish(data, error=error, policy_version=self._policy_version(reply), shown=view)
        out = content if view is data else orjson.dumps(view)
        return Response(out, reply.status_code, headers=headers)

    def stream(self, reply: UpstreamReply) -> StreamingResponse:
        """Pass a streamed reply through event by event, accumulating its record."""
        headers = reply.headers()
        headers["x-fulmen-call-id"] = self.call_id
        return StreamingResponse(
            self._events(reply), status_code=reply.status_code, headers=headers
        )

    async def _events(self, reply: UpstreamReply) -> AsyncIterator[bytes]:
        accumulator = StreamAccumulator(self.engine_endpoint)
        decoder = SSEDecoder()
        error: dict[str, Any] | None = None
        events = self.translation.events() if self.translation is not None else None
        response: dict[str, Any] | None = None
        try:
            if events is not None:
                yield events.opening()
            async for data in reply.iter_bytes():
                out = [self._rewrite(event, accumulator, events) for event in decoder.feed(data)]
                if out:
                    yield b"".join(out)
            if decoder.tail().strip():  # a stream cut without its final blank line
                yield self._rewrite(decoder.tail(), accumulator, events)
        except (UpstreamTimeout, UpstreamUnavailable) as exc:
            payload = error_body(exc)
            error = payload["error"]
            if events is None:
                yield self.api.stream_error(exc.http_status, payload)
        finally:
            is_tokens = self.engine_endpoint in TOKEN_ENDPOINTS
            response = accumulator.response() if is_tokens else None
            shown = self.view(response) if response is not None else None
            version = self._policy_version(reply)
            self.finish(response, error=error, policy_version=version, shown=shown)
            # The agent may have hung up (this task is being cancelled): close anyway.
            with anyio.CancelScope(shield=True):
                await reply.aclose()
        if events is not None:
            failure = error or accumulator.error
            yield events.closing(None if failure else response, failure)

    def _rewrite(
        self, event: bytes, accumulator: StreamAccumulator, events: EventStream | None
    ) -> bytes:
        data = event_data(event)
        chunk = _loads_object(data) if data is not None and data != b"[DONE]" else None
        if chunk is None:
            # Translated streams have no ``[DONE]``; their own last event ends them.
            return event + b"\n\n" if events is None else b""
        accumulator.add(chunk)
        if events is not None:
            return events.add(chunk)
        view = agent_chunk(chunk, self.asked)
        if view is None:
            return b""
        if view is chunk:
            return event + b"\n\n"
        return b"data: " + orjson.dumps(view) + b"\n\n"


def _loads_object(raw: bytes) -> dict[str, Any] | None:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return as_object(value)


def _error_of(data: dict[str, Any]) -> dict[str, Any]:
    error = data.get("error")
    fields = as_object(error)
    if fields is not None:
        return fields
    return {"message": str(error if error is not None else data)[:2000], "type": "upstream_error"}


def _json_response(payload: dict[str, Any], status: int) -> Response:
    return Response(orjson.dumps(payload), status, media_type="application/json")
