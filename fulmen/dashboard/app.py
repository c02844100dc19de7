"""The dashboard as a Starlette ASGI app: the static page and a thin JSON API over a ``Store``.

``create_app(store, token=..., engine_url=...)`` serves ``/`` and ``/static/*`` (plain ES modules
shipped in the package, no build step) and the API under ``/api/``, which reads only through
the ``Store`` interface, so any backend works: SQLite, PostgreSQL or a remote store service.
``TokenGate`` guards the API; errors are JSON ``{"error", "code", "detail"}`` with the status of
the ``FulmenError`` raised.

=====================================  ======================================================
``GET /api/info``                      version, whether an engine is linked, newest position
``GET /api/rollouts``                  the rollouts table (``fulmen.dashboard.rollout_table``)
``GET /api/rollouts/{id}``             one rollout (``fulmen.dashboard.rollout_detail``)
``GET /api/runs``                      runs, latest first
``GET /api/runs/{id}/metrics``         a run and its metrics (``after_step`` for the new ones)
``GET /api/runs/{id}/diagnosis``       where its step time went (``fulmen runs diagnose``)
``GET /api/runs/{id}/health``          steps without an update and why, the served version
``GET /api/runs/compare?run=A&run=B``  runs side by side (``fulmen runs compare``)
``GET /api/releases``                  canary releases, latest created first
``GET /api/releases/{name}``           a release, its events, its arms (``fulmen release status``)
``GET /api/prompts``                   prompt versions with lineage and scores
``GET /api/prompts/diff?a=&b=``        side-by-side diff of two prompt versions
``GET /api/model_versions``            model versions (``run_id`` for one run)
``POST /api/model_versions/serve``     ask the linked engine to serve a version
``GET /api/tokens?ids=``               token texts from the linked engine
``GET|POST /api/debug/*``              replay, re-score, A/B (``fulmen.dashboard.debug_api``)
``GET /api/jobs/{id}``                 a debugging job's state and result
=====================================  ======================================================
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import orjson
from pydantic import BaseModel, ConfigDict, Field
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from fulmen.dashboard.bodies import json_body, validated
from fulmen.dashboard.debug_api import DebugActions, DebugTools
from fulmen.dashboard.gate import SecurityHeaders, TokenGate
from fulmen.dashboard.jobs import Jobs
from fulmen.dashboard.local_tokens import LocalTokens
from fulmen.dashboard.release_view import ReleaseViews
from fulmen.dashboard.resources_view import model_versions, prompt_diff, prompt_versions
from fulmen.dashboard.rewards import RewardReader
from fulmen.dashboard.rollout_detail import rollout_detail
from fulmen.dashboard.rollout_table import RolloutFilter, RolloutTable
from fulmen.dashboard.run_analysis import parse_run_ids, run_diagnosis, runs_comparison
from fulmen.dashboard.run_health import run_health
from fulmen.dashboard.runs_view import RunVersions, list_runs, run_metrics
from fulmen.engines.link import EngineLink
from fulmen.errors import ConfigError, FulmenError, InvalidRequest, NotFound
from fulmen.transitions.trajectory import TransitionOptions
from fulmen.types import LLMResource, Mode, RolloutStatus
from fulmen.types.limits import Id
from fulmen.version import __version__

if TYPE_CHECKING:
    from fulmen.store.base import Store

__all__ = ["AUTO_ENGINE", "STATIC_DIR", "create_app"]

logger = logging.getLogger(__name__)

AUTO_ENGINE = "auto"
STATIC_DIR = Path(str(files("fulmen.dashboard") / "static"))
_JSON = "application/json"
Handler = Callable[[Request], Awaitable[Any]]


class TableParams(BaseModel):
    """Query parameters of ``GET /api/rollouts``; a bad one is a 422 naming it."""

    model_config = ConfigDict(extra="forbid")

    status: list[RolloutStatus] = Field(default_factory=list)
    mode: Mode | None = None
    task_id: Id | None = None
    resources_version: int | None = Field(default=None, ge=1)
    run: Id | None = None
    min_reward: float | None = None
    max_reward: float | None = None
    agent: str | None = Field(default=None, max_length=256)
    q: str | None = Field(default=None, max_length=1000)
    before: int | None = Field(default=None, ge=1)
    limit: int = Field(default=25, ge=1, le=500)


class ServeRequest(BaseModel):
    """Body of ``POST /api/model_versions/serve``: which version, under which model name."""

    model_config = ConfigDict(extra="forbid")

    run_id: Id
    version: int = Field(ge=1)
    name: str | None = Field(default=None, min_length=1, max_length=256)


def _params(model: type[BaseModel], request: Request) -> Any:
    raw: dict[str, Any] = {}
    for key, value in request.query_params.multi_items():
        if value == "":
            continue  # an empty form field means "not set"
        if key == "status":
            raw.setdefault(key, []).append(value)
        else:
            raw[key] = value
    return validated(model, raw)


def _json(payload: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status_code=status, media_type=_JSON)


def _error(exc: FulmenError) -> Response:
    if exc.http_status >= 500:
        logger.error("dashboard: %s", exc.message, exc_info=exc)
    return _json({"error": exc.message, "code": exc.code, "detail": exc.detail}, exc.http_status)


def _endpoint(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        try:
            return _json(await handler(request))
        except FulmenError as exc:
            return _error(exc)

    endpoint.__name__ = handler.__name__
    return endpoint


class _Api:
    """The API's handlers and the state they share (reward cache, newest position)."""

    def __init__(
        self, store: Store, engine_url: str | None, options: TransitionOptions | None
    ) -> None:
        self.store = store
        self.engine_url = engine_url
        self.options = options
        self._links: dict[str, EngineLink] = {}
        self.rewards = RewardReader(store)
        self.table = RolloutTable(store, self.rewards)
        self.run_versions = RunVersions(store)
        self.local_tokens = LocalTokens(store)
        self.releases = ReleaseViews(store)

    async def engine(self) -> EngineLink | None:
        """Return the linked engine: the one given, or with ``auto`` the latest ``llm``'s.

        ``auto`` follows the engine the latest resources version points agents at (the
        running trainer's own engine), read when needed so a restarted engine is found.
        """
        url = self.engine_url
        if url == AUTO_ENGINE:
            latest = await self.store.latest_resources()
            llm = latest.resources.get("llm") if latest is not None else None
            url = llm.base_url if isinstance(llm, LLMResource) else None
        if not url:
            return None
        if url not in self._links:
            self._links[url] = EngineLink(url)
        return self._links[url]

    async def info(self, request: Request) -> Any:
        del request
        engine = await self.engine()
        return {
            "version": __version__,
            "engine": engine.url if engine is not None else None,
            "newest": await self.table.newest_position(),
        }

    async def rollouts(self, request: Request) -> Any:
        p: TableParams = _params(TableParams, request)
        where = RolloutFilter(
            statuses=tuple(p.status),
            mode=p.mode,
            task_id=p.task_id,
            resources_version=p.resources_version,
            run_id=p.run,
            resources_versions=await self.run_versions.of(p.run) if p.run else frozenset(),
            min_reward=p.min_reward,
            max_reward=p.max_reward,
            agent=p.agent,
            text=p.q,
        )
        page = await self.table.page(where, before=p.before, limit=p.limit)
        return {
            "items": page.items,
            "before": page.before,
            "examined": page.examined,
            "exhausted": page.exhausted,
            "newest": page.newest,
        }

    async def rollout(self, request: Request) -> Any:
        attempt = request.query_params.get("attempt") or None
        return await rollout_detail(
            self.store, request.path_params["rollout_id"], attempt_id=attempt, options=self.options
        )

    async def runs(self, request: Request) -> Any:
        del request
        return await list_runs(self.store)

    async def metrics(self, request: Request) -> Any:
        after = request.query_params.get("after_step")
        if after is not None and not after.isdigit():
            raise InvalidRequest(f"after_step must be a step number, got {after!r}")
        return await run_metrics(
            self.store,
            request.path_params["run_id"],
            after_step=int(after) if after is not None else None,
        )

    async def compare(self, request: Request) -> Any:
        return await runs_comparison(self.store, parse_run_ids(request.query_params.getlist("run")))

    async def diagnosis(self, request: Request) -> Any:
        auto = self.engine_url == AUTO_ENGINE
        return await run_diagnosis(
            self.store,
            request.path_params["run_id"],
            self.run_versions,
            linked_url=None if auto else self.engine_url,
            follows_store=auto,
        )

    async def health(self, request: Request) -> Any:
        return await run_health(self.store, request.path_params["run_id"])

    async def release_list(self, request: Request) -> Any:
        del request
        return await self.releases.listing()

    async def release(self, request: Request) -> Any:
        return await self.releases.detail(request.path_params["name"])

    async def prompts(self, request: Request) -> Any:
        del request
        return await prompt_versions(self.store)

    async def diff(self, request: Request) -> Any:
        a, b = request.query_params.get("a"), request.query_params.get("b")
        if not a or not b:
            raise InvalidRequest("give two prompt versions: ?a=NAME@V&b=NAME@V")
        return await prompt_diff(self.store, a, b)

    async def model_versions(self, request: Request) -> Any:
        return await model_versions(self.store, request.query_params.get("run_id") or None)

    async def serve(self, request: Request) -> Any:
        engine = await self.engine()
        if engine is None:
            raise ConfigError(
                "no engine is linked to this dashboard: start it with --engine URL or --engine "
                "auto (fulmen train links its own engine)"
            )
        req: ServeRequest = await json_body(ServeRequest, request)
        found = await self.store.list_model_versions(req.run_id)
        match = next((v for v in found if v.version == req.version), None)
        if match is None:
            raise NotFound(f"run {req.run_id!r} has no model version {req.version}")
        name = req.name or f"{req.run_id}-v{req.version}"
        served = await engine.serve(match, name)
        logger.info("dashboard: engine %s now serves %s", engine.url, served)
        return served

    async def tokens(self, request: Request) -> Any:
        """Each token id's text: from the linked engine, else the run's tokenizer on disk.

        ``source`` says which; without either, ``why`` says what would name them.
        """
        raw = request.query_params.get("ids", "")
        try:
            ids = [int(part) for part in raw.split(",") if part][:4096]
        except ValueError:
            message = f"ids must be comma-separated token ids, got {raw[:80]!r}"
            raise InvalidRequest(message) from None
        engine = await self.engine()
        if engine is not None:
            try:
                texts = await engine.token_texts(ids)
                return {"texts": {str(k): v for k, v in texts.items()}, "source": engine.url}
            except (httpx.HTTPError, FulmenError) as exc:  # an engine that ended with the run
                logger.info("dashboard: engine %s names no tokens (%s)", engine.url, exc)
        local, model = await self.local_tokens.texts(ids)
        if model is not None:
            return {
                "texts": {str(k): v for k, v in local.items()},
                "source": f"tokenizer of {model}",
            }
        return {
            "texts": {},
            "why": "no engine answers and the store's newest run names no model on this machine: "
            "start the dashboard with --engine URL, or where the run's model is",
        }


async def _index(request: Request) -> Response:
    del request
    return FileResponse(STATIC_DIR / "index.html", media_type="text/html")


def create_app(
    store: Store,
    *,
    token: str | None = None,
    engine_url: str | None = None,
    transition_options: TransitionOptions | None = None,
    debug: DebugTools | None = None,
) -> Starlette:
    """Build the dashboard app over ``store``.

    Args:
        store: any backend; the app neither closes it nor runs its watchdog.
        token: bearer token every ``/api/`` request must carry (``None``: no auth, which
            ``fulmen dashboard`` allows only on loopback).
        engine_url: a running engine to serve model versions with and to name tokens, or
            ``"auto"`` for the engine of the latest resources' ``llm``; without one the serve
            action answers 400 and tokens show as ids.
        transition_options: how the trainer builds transitions (which tokens are trained).
        debug: the training config and reward function the debugging actions use; without
            them those actions answer 400 saying which launch option they need. The app's
            background jobs are ``app.state.jobs`` (``Jobs.aclose`` stops them).
    """
    api = _Api(store, engine_url, transition_options)
    jobs = Jobs()
    tools = DebugActions(store, debug or DebugTools(), jobs)
    routes = [
        Route("/", _index, methods=["GET"]),
        Route("/api/info", _endpoint(api.info), methods=["GET"]),
        Route("/api/rollouts", _endpoint(api.rollouts), methods=["GET"]),
        Route("/api/rollouts/{rollout_id:path}", _endpoint(api.rollout), methods=["GET"]),
        Route("/api/runs", _endpoint(api.runs), methods=["GET"]),
        Route("/api/runs/compare", _endpoint(api.compare), methods=["GET"]),
        Route("/api/runs/{run_id:path}/metrics", _endpoint(api.metrics), methods=["GET"]),
        Route("/api/runs/{run_id:path}/diagnosis", _endpoint(api.diagnosis), methods=["GET"]),
        Route("/api/runs/{run_id:path}/health", _endpoint(api.health), methods=["GET"]),
        Route("/api/releases", _endpoint(api.release_list), methods=["GET"]),
        Route("/api/releases/{name:path}", _endpoint(api.release), methods=["GET"]),
        Route("/api/prompts", _endpoint(api.prompts), methods=["GET"]),
        Route("/api/prompts/diff", _endpoint(api.diff), methods=["GET"]),
        Route("/api/model_versions", _endpoint(api.model_versions), methods=["GET"]),
        Route("/api/model_versions/serve", _endpoint(api.serve), methods=["POST"]),
        Route("/api/tokens", _endpoint(api.tokens), methods=["GET"]),
        Route("/api/debug", _endpoint(tools.capabilities), methods=["GET"]),
        Route("/api/debug/replay", _endpoint(tools.replay), methods=["POST"]),
        Route("/api/debug/rescore", _endpoint(tools.rescore), methods=["POST"]),
        Route("/api/debug/ab", _endpoint(tools.ab), methods=["POST"]),
        Route("/api/jobs/{job_id}", _endpoint(tools.job), methods=["GET"]),
        Mount("/static", StaticFiles(directory=STATIC_DIR), name="static"),
    ]
    app = Starlette(
        routes=routes,
        middleware=[Middleware(SecurityHeaders), Middleware(TokenGate, token=token)],
    )
    app.state.jobs = jobs
    return app
