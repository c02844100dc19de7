"""The dashboard's debugging actions: replay a rollout, re-score rollouts, A/B two prompts.

Each action starts a background job (``fulmen.dashboard.jobs``) that calls the same functions
as ``fulmen replay``, ``fulmen rescore`` and ``fulmen ab`` (``fulmen.debugging``) and answers
the job at once; the page polls ``GET /api/jobs/{id}`` for the report. What a web request may
choose is deliberately narrow: a rollout id, filters, two prompt versions already in the store
and a bounded count. The agent, the tasks and the reward function come from the dashboard's
launch (``DebugTools``: ``--config`` and ``--reward``), so a web page can never make the server
import a module, read a file, or write a reward.

=====================================  ======================================================
``GET /api/debug``                     which actions this dashboard can run, and why not
``POST /api/debug/replay``             ``{"rollout_id", "attempt_id"?}``: replay one rollout
``POST /api/debug/rescore``            ``{"mode"?, "resources_version"?, "task_id"?,
                                       "limit"?}``: the ``--reward`` function over rollouts
``POST /api/debug/ab``                 ``{"a", "b", "n"}``: two prompt versions of the store
``GET /api/jobs/{id}``                 a job: ``running``, ``done`` with its result, ``failed``
=====================================  ======================================================
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from fulmen.dashboard.bodies import json_body
from fulmen.dashboard.jobs import Jobs
from fulmen.errors import ConfigError, InvalidRequest
from fulmen.types import Mode
from fulmen.types.limits import Id

if TYPE_CHECKING:
    from starlette.requests import Request

    from fulmen.debugging.rescore import RewardFunction
    from fulmen.store.base import Store
    from fulmen.trainer.config import TrainConfig

__all__ = [
    "MAX_AB_TASKS",
    "MAX_RESCORED",
    "ABRequest",
    "DebugActions",
    "DebugTools",
    "ReplayRequest",
    "RescoreRequest",
]

MAX_RESCORED = 1000  # rollouts one re-scoring reads (the CLI's default limit)
MAX_AB_TASKS = 64  # tasks of one A/B test: 2 * 64 agent runs


@dataclass(frozen=True)
class DebugTools:
    """What the dashboard was launched with for its debugging actions.

    Attributes:
        config: the training config (agent, tasks, engine, rollout settings); replay and A/B
            need it. Its ``python_path`` must already be importable (the CLI puts it on
            ``sys.path``).
        reward: the re-scoring function chosen at launch (``--reward``), or ``None``.
        reward_spec: how it was named (``module:function``), shown on the page.
    """

    config: TrainConfig | None = None
    reward: RewardFunction | None = None
    reward_spec: str | None = None


class ReplayRequest(BaseModel):
    """Body of ``POST /api/debug/replay``."""

    model_config = ConfigDict(extra="forbid")

    rollout_id: Id
    attempt_id: Id | None = None


class RescoreRequest(BaseModel):
    """Body of ``POST /api/debug/rescore``: which succeeded rollouts to re-score."""

    model_config = ConfigDict(extra="forbid")

    mode: Mode | None = None
    task_id: Id | None = None
    resources_version: int | None = Field(default=None, ge=1)
    limit: int = Field(default=200, ge=1, le=MAX_RESCORED)


class ABRequest(BaseModel):
    """Body of ``POST /api/debug/ab``: two prompt versions of the store and a task count."""

    model_config = ConfigDict(extra="forbid")

    a: str = Field(min_length=1, max_length=300)
    b: str = Field(min_length=1, max_length=300)
    n: int = Field(default=8, ge=2, le=MAX_AB_TASKS)


class DebugActions:
    """The handlers of the debugging routes over ``store`` with the launch's ``tools``."""

    def __init__(self, store: Store, tools: DebugTools, jobs: Jobs) -> None:
        self.store = store
        self.tools = tools
        self.jobs = jobs

    async def capabilities(self, request: Request) -> Any:
        """Say which actions can run here; ``why_not`` explains a disabled one."""
        del request
        no_config = "start the dashboard with --config CONFIG (the training config)"
        return {
            "replay": {"enabled": self.tools.config is not None, "why_not": no_config},
            "ab": {"enabled": self.tools.config is not None, "why_not": no_config},
            "rescore": {
                "enabled": self.tools.reward is not None,
                "reward": self.tools.reward_spec,
                "why_not": "start the dashboard with --reward module:function",
            },
            "max_rescored": MAX_RESCORED,
            "max_ab_tasks": MAX_AB_TASKS,
        }

    async def job(self, request: Request) -> Any:
        """Return one job's state, and its result once done."""
        return self.jobs.get(request.path_params["job_id"]).view()

    async def replay(self, request: Request) -> Any:
        """Start replaying one rollout with its recorded replies (``replay_rollout``)."""
        from fulmen.debugging.replay import replay_rollout

        config = self._config("replay")
        req: ReplayRequest = await json_body(ReplayRequest, request)
        await self.store.get_rollout(req.rollout_id)  # a 404 now, not a failed job later

        async def work() -> dict[str, Any]:
            report = await replay_rollout(
                self.store,
                req.rollout_id,
                agent=config.agent,
                rollouts=config.rollouts,
                attempt_id=req.attempt_id,
            )
            return {
                **asdict(report),
                "is_faithful": report.is_faithful,
                "is_reward_same": report.is_reward_same,
                "divergences": [{**asdict(d), "summary": d.summary()} for d in report.divergences],
            }

        return self.jobs.start("replay", req.rollout_id, work).view()

    async def rescore(self, request: Request) -> Any:
        """Start re-scoring the selected rollouts with the launch's reward function (read-only)."""
        from fulmen.debugging.rescore import RescoreFilter, rescore
        from fulmen.debugging.rescore_report import rescore_summary

        reward = self.tools.reward
        if reward is None:
            raise ConfigError(
                "no reward function: start the dashboard with --reward module:function"
            )
        req: RescoreRequest = await json_body(RescoreRequest, request)
        selection = RescoreFilter(
            mode=req.mode,
            task_id=req.task_id,
            resources_version=req.resources_version,
            limit=req.limit,
        )

        async def work() -> dict[str, Any]:
            summary = rescore_summary(await rescore(self.store, reward, selection))
            return {**summary, "reward": self.tools.reward_spec}

        subject = req.model_dump_json(exclude_none=True)
        return self.jobs.start("rescore", subject, work).view()

    async def ab(self, request: Request) -> Any:
        """Start an A/B test of two prompt versions of the store on the config's tasks."""
        from fulmen.debugging.ab import ab_from_config, is_store_ref
        from fulmen.prompts import find_prompt_version, load_prompt_versions

        config = self._config("A/B test")
        req: ABRequest = await json_body(ABRequest, request)
        for ref in (req.a, req.b):
            # Only versions in the store: a file path or module:attribute from a web page
            # would make the server read files or import modules.
            if not is_store_ref(ref):
                raise InvalidRequest(
                    f"a prompt must be a version in the store (NAME@V), got {ref!r}"
                )
        versions = await load_prompt_versions(self.store)
        a, b = find_prompt_version(versions, req.a), find_prompt_version(versions, req.b)
        if a.name != b.name:
            raise InvalidRequest(
                f"A and B must be versions of the same prompt resource, got {a.name!r} and "
                f"{b.name!r}"
            )

        async def work() -> dict[str, Any]:
            result = await ab_from_config(
                config, (a.prompt, b.prompt), labels=(req.a, req.b), n=req.n, name=a.name
            )
            return asdict(result)

        return self.jobs.start("ab", f"{req.a} vs {req.b}, n={req.n}", work).view()

    def _config(self, action: str) -> TrainConfig:
        if self.tools.config is None:
            raise ConfigError(
                f"the {action} needs the training config: start the dashboard with --config "
                "CONFIG (fulmen train passes its own)"
            )
        return self.tools.config
